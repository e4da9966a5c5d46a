// skim generate: stream text for a prompt, then print stats (human or --json).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <optional>

#include "cli_common.h"
#include "core/error.h"
#include "engine/field_checks.h"
#include "commands.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace skim::cli {

namespace {
struct GenerateArgs {
  EngineOptions engine;
  GenerationRequest request;
  std::string prompt_file;
  bool json = false;
  bool chat = false;
  std::string chat_template;  // a Jinja file instead of the model's template
};

// --chat: the prompt as one user message through the chat template (rendered before the
// model loads, so that a template error comes first).
std::string chat_prompt(const GenerateArgs& a) {
  std::optional<ChatTemplate> t;
  if (!a.chat_template.empty()) t = ChatTemplate::from_file(a.chat_template, a.engine.model_dir);
  else t = ChatTemplate::from_model_dir(a.engine.model_dir);
  SKIM_REQUIRE(t.has_value(), "--chat: {} has no chat template (chat_template.jinja or tokenizer_config.json "
               "chat_template); give one with --chat-template FILE", a.engine.model_dir.string());
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", a.request.prompt}}});
  return t->render(in);
}
}  // namespace

void register_generate(CLI::App& root, std::function<void()>& run) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* app = root.add_subcommand("generate", "Generate text from a prompt");
  add_engine_flags(*app, args->engine);
  GenerationRequest& r = args->request;
  auto* p = app->add_option("-p,--prompt", r.prompt, "prompt text");
  app->add_option("-f,--prompt-file", args->prompt_file, "read the prompt from a file")->excludes(p);
  app->add_option("-n,--max-tokens", r.max_tokens, "tokens to generate")->capture_default_str();
  app->add_option("--temperature", r.sampling.temperature, "0 = greedy")->capture_default_str();
  app->add_option("--top-k", r.sampling.top_k, "0 = off")->capture_default_str();
  app->add_option("--top-p", r.sampling.top_p, "nucleus mass")->capture_default_str();
  add_seed_flag(*app, r.sampling.seed, "sampling seed");
  app->add_option("--stop", r.stop, "stop string (repeatable)");
  app->add_flag("--ignore-eos", r.ignore_eos, "keep generating past end-of-text");
  app->add_flag("--json", args->json, "print one JSON object with the text and stats");
  app->add_option("--logprobs", r.logprobs, "with --json: each generated token's log-probability and N alternatives")
      ->check(CLI::Range(0, 20));
  app->add_flag("--chat", args->chat, "send the prompt as a user message through the model's chat template");
  app->add_option("--chat-template", args->chat_template, "with --chat: a Jinja chat template file instead of the model's")
      ->check(CLI::ExistingFile);

  app->callback([app, args, &run] {
    run = [args] {
      GenerateArgs& a = *args;
      check_request(a.request);  // the checks the server and the library make, before loading
      if (a.engine.model_dir.empty()) a.engine.model_dir = default_model_dir();
      if (!a.prompt_file.empty()) a.request.prompt = read_text_file(a.prompt_file, "--prompt-file");
      SKIM_REQUIRE(!a.request.prompt.empty(), "give a prompt with --prompt or --prompt-file");
      SKIM_REQUIRE(a.request.logprobs < 0 || a.json, "--logprobs needs --json (they are part of its output)");
      SKIM_REQUIRE(a.chat || a.chat_template.empty(), "--chat-template needs --chat");
      const std::string chat_text = a.chat ? chat_prompt(a) : "";
      Engine engine(a.engine);
      if (const std::string note = host_kv_dense_note(a.engine); !note.empty())
        std::fprintf(stderr, "skim: %s\n", note.c_str());
      // Tokenized as transformers' apply_chat_template does: the template writes the BOS, so
      // no post-processor's is added.
      if (a.chat) a.request.prompt_ids = engine.tokenizer().encode(chat_text, true);
      TextCallback stream;
      if (!a.json)
        stream = [](size_t, std::string_view t) {
          std::fwrite(t.data(), 1, t.size(), stdout);
          std::fflush(stdout);
        };
      auto results = engine.generate({a.request}, stream, prefill_progress("prefill"));
      const GenerationStats& s = results[0].stats;
      double prefill_tps = s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0;
      int decode_steps = std::max(0, s.generated_tokens - 1);  // the first token comes from prefill
      double decode_tps = s.decode_seconds > 0 ? decode_steps / s.decode_seconds : 0;
      if (a.json) {
        nlohmann::json j = {{"text", results[0].text},
                            {"tokens", results[0].tokens},
                            {"policy", a.engine.policy},
                            {"prompt_tokens", s.prompt_tokens},
                            {"generated_tokens", s.generated_tokens},
                            {"finish_reason", s.finish_reason},
                            {"prefill_seconds", s.prefill_seconds},
                            {"decode_seconds", s.decode_seconds},
                            {"first_step_seconds", s.first_step_seconds},
                            {"prefill_tokens_per_s", prefill_tps},
                            {"decode_tokens_per_s", decode_tps},
                            {"kv_bytes_per_step", s.kv_bytes_per_step},
                            // The policy's counters (CPU), or the backend's (the GPU over host KV:
                            // pages copied, hits, pages copied ahead), since the engine began.
                            {"counters", engine.policy_stats().counters}};
        if (a.request.logprobs >= 0) {
          nlohmann::json lps = nlohmann::json::array();
          for (const TokenLogprob& lp : results[0].logprobs) {
            nlohmann::json top = nlohmann::json::array();
            for (const auto& [id, v] : lp.top) top.push_back({{"token", id}, {"logprob", v}});
            lps.push_back({{"token", lp.token}, {"logprob", lp.logprob}, {"top", top}});
          }
          j["logprobs"] = lps;
        }
        std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
      } else {
        std::fprintf(stderr,
                     "\n\n[%s] prompt %d tokens, prefill %.1f tok/s | generated %d tokens (%s), "
                     "decode %.1f tok/s | KV read %.2f MB/step\n",
                     a.engine.policy.c_str(), s.prompt_tokens, prefill_tps, s.generated_tokens,
                     s.finish_reason.c_str(), decode_tps, s.kv_bytes_per_step / 1e6);
      }
    };
  });
}

}  // namespace skim::cli
