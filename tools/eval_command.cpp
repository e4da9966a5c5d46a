// skim eval: quality and work of attention policies against dense on the same model, text
// and prompts (DESIGN.md section 7). Prints a table, or JSON with --json; --plot draws
// perplexity by position bucket.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "eval/eval_runner.h"
#include "eval/ppl_plot.h"
#include "eval/report.h"
#include "tokenizer/chat_template.h"

namespace skim::cli {

namespace {

struct EvalArgs {
  EngineOptions engine;
  std::string policies = "dense,quest,resa";
  std::string tasks = "ppl,error,passkey,agree";
  std::string lengths, depths = "0.1,0.3,0.5,0.7,0.9", keys = "1,4", needles = "number,word,code";
  std::vector<std::string> data;
  std::string plot, question = "dense";
  bool json = false;
  eval::EvalOptions options;
};

// The held-out text shipped with the repository, found like the demo model.
std::filesystem::path default_data_dir() {
  namespace fs = std::filesystem;
  const fs::path rel = "data/heldout-python";
  if (fs::is_directory(rel)) return rel;
#ifdef SKIM_SOURCE_DIR
  if (fs::is_directory(fs::path(SKIM_SOURCE_DIR) / rel)) return fs::path(SKIM_SOURCE_DIR) / rel;
#endif
  fail("--data not given and {} was not found; pass --data FILE_OR_DIR", rel.string());
}

// One status line: on a terminal redrawn in place at most five times a second; otherwise (a
// log) a line every few seconds, so batch jobs show where they are.
eval::ProgressFn status_lines() {
  const bool tty = isatty(fileno(stderr));
  auto last = std::make_shared<double>(eval::now_seconds());
  const double interval = tty ? 0.2 : progress_interval_seconds();
  return [last, tty, interval](const std::string& line, bool result) {
    double now = eval::now_seconds();
    if (!result && now - *last < interval) return;
    *last = now;
    if (tty)  // a status line is redrawn in place; a result stays on its own line
      std::fprintf(stderr, result ? "\r\033[K[eval] %s\n" : "\r\033[K[eval] %s", line.c_str());
    else
      std::fprintf(stderr, "[eval] %s\n", line.c_str());
    std::fflush(stderr);
  };
}

// The needle task's prompts: one user message through the model's chat template, the
// assistant's turn opened (none without a template: the task then says so).
eval::ChatRender user_turn_renderer(const std::filesystem::path& model_dir, const eval::EvalOptions& o) {
  if (!o.has("needle")) return {};
  std::optional<ChatTemplate> t = ChatTemplate::from_model_dir(model_dir);
  SKIM_REQUIRE(t.has_value(), "--tasks needle asks through the model's chat template, and {} has none "
               "(chat_template.jinja or tokenizer_config.json chat_template)", model_dir.string());
  return [t = std::move(*t)](const std::string& user) {
    ChatTemplateInputs in;
    in.messages.push_back({{"role", "user"}, {"content", user}});
    return t.render(in);
  };
}

void run_eval_command(EvalArgs& a) {
  eval::EvalOptions& o = a.options;
  o.policies = eval::parse_policies(a.policies);
  o.tasks = eval::parse_tasks(a.tasks);
  if (a.lengths.empty()) {  // the lengths that fit the context, else the context
    o.lengths.clear();
    for (int l : {4096, 8192, 16384})
      if (l <= o.ctx) o.lengths.push_back(l);
    if (o.lengths.empty()) o.lengths.push_back(o.ctx);
  } else {
    o.lengths = eval::parse_int_list(a.lengths, "--lengths");
  }
  o.depths = eval::parse_double_list(a.depths, "--depths");
  o.keys = eval::parse_int_list(a.keys, "--keys");
  o.needles = eval::parse_name_list(a.needles, "--needles");
  o.question_dense = a.question == "dense";
  if (a.data.empty()) {
    o.data = {default_data_dir()};
  } else {
    o.data.assign(a.data.begin(), a.data.end());
  }
  eval::validate(o);
  if (!a.plot.empty()) {
    SKIM_REQUIRE(o.has("ppl"), "--plot draws perplexity: add ppl to --tasks");
    require_writable_file(a.plot, "--plot");  // before the evaluation, not after it
  }
  eval::Corpus corpus = eval::load_corpus(o.data, "--data");

  if (a.engine.model_dir.empty()) a.engine.model_dir = default_model_dir();
  a.engine.policy = "dense";
  a.engine.max_context = o.ctx + std::max(o.answer_tokens, o.needle_tokens) + 8;  // answers may run past --ctx
  a.engine.max_sequences = 2;                          // the dense prefill and one fork
  Engine engine(a.engine);
  if (o.has("passkey") || o.has("needle") || o.runs_windows()) engine.tokenizer();  // fails early without one

  eval::EvalResults r = eval::run_eval(engine, corpus, o, status_lines(), user_turn_renderer(a.engine.model_dir, o));
  if (isatty(fileno(stderr))) std::fprintf(stderr, "\r\033[K");
  r.model = a.engine.model_dir.string();
  if (a.json) {
    std::cout << eval::to_json(r).dump() << std::endl;
  } else {
    std::cout << eval::format_table(r);
    std::fprintf(stderr, "[eval] %s, %.0f s\n", r.model.c_str(), r.seconds);
  }
  if (!a.plot.empty()) eval::write_perplexity_plot(r, a.plot);
}

}  // namespace

void register_eval(CLI::App& root, std::function<void()>& run) {
  auto args = std::make_shared<EvalArgs>();
  EvalArgs& a = *args;
  eval::EvalOptions& o = a.options;
  CLI::App* app = root.add_subcommand("eval", "Measure attention policies against dense: perplexity, "
                                              "output error, passkey retrieval, agreement, KV read");
  app->add_option("-m,--model", a.engine.model_dir, "Hugging Face model directory (default: the demo model)");
  app->add_option("--policy", a.policies, "comma-separated policies; dense is always run as the baseline")
      ->capture_default_str();
  app->add_option("--tasks", a.tasks, "ppl, error, passkey, needle, agree (comma-separated, or all)")->capture_default_str();
  app->add_option("--ctx", o.ctx, "tokens of the ppl / error / agree window (prefill + decode)")->capture_default_str();
  app->add_option("--decode-tokens", o.decode_tokens, "teacher-forced decode steps for ppl and error")
      ->capture_default_str();
  app->add_option("--buckets", o.buckets, "perplexity position buckets")->capture_default_str();
  app->add_option("--docs", o.docs, "text windows for ppl, error and agree")->capture_default_str();
  app->add_option("--lengths", a.lengths, "passkey prompt lengths in tokens (default: 4096,8192,16384 up to --ctx)");
  app->add_option("--prompts", o.prompts, "passkey prompts per length and key count")->capture_default_str();
  app->add_option("--depths", a.depths, "depths of the asked key, fractions of the prompt, cycled over prompts")
      ->capture_default_str();
  app->add_option("--keys", a.keys, "passkey variants: definition lines per prompt")->capture_default_str();
  app->add_option("--needles", a.needles, "needle kinds for the needle task: number, word, code (comma-separated)")
      ->capture_default_str();
  app->add_option("--needle-tokens", o.needle_tokens, "greedy tokens at most for a needle answer (EOS ends it)")
      ->capture_default_str();
  app->add_option("--question", a.question,
                  "retrieval question: dense (prefilled with the haystack, as a server does; the last "
                  "prompt token and the answer decoded under the policy) or policy (decoded under it too)")
      ->check(CLI::IsMember({"policy", "dense"}))
      ->capture_default_str();
  app->add_flag("--coverage", o.coverage,
               "needle task: per layer, the dense attention mass on the needle and the part of it in the "
               "keys the policy chose (a dense scoring pass per head and step: slow)");
  app->add_flag("--locality", o.locality,
                "ppl/error windows: per (layer, KV head) and step, the pages holding the chosen keys, their "
                "overlap with the step before and the hit rate of an LRU page cache (JSON: locality)");
  app->add_option("--answer-tokens", o.answer_tokens, "greedy tokens generated for a passkey answer")
      ->capture_default_str();
  app->add_option("--agree-tokens", o.agree_tokens, "greedy tokens compared with dense")->capture_default_str();
  app->add_option("--data", a.data, "text files or folders (default: data/heldout-python)");
  app->add_option("--seed", o.seed, "seed for text windows and passkey prompts")->capture_default_str();
  app->add_option("-t,--threads", a.engine.threads, "CPU threads (0: all cores)")->capture_default_str();
  app->add_option("--chunk", a.engine.prefill_chunk, "prefill chunk, tokens (0: 512 on the CPU, 2048 on the GPU)")->capture_default_str();
  app->add_option("--tp", a.engine.tensor_parallel, "tensor-parallel ranks (one thread each, sharing --threads)")
      ->capture_default_str();
  app->add_flag("--json", a.json, "print one JSON object instead of the table");
  app->add_option("--plot", a.plot, "write a PNG of perplexity by position bucket");
  app->callback([args, &run] { run = [args] { run_eval_command(*args); }; });
}

}  // namespace skim::cli
