#include "server/openai_api.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace skim::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(param + ": " + message, param);
}

// The field's value when present and not null, checked by `ok`.
template <class T, class Ok>
bool read(const json& body, const char* name, T& out, Ok ok, const char* what) {
  if (!body.contains(name) || body[name].is_null()) return false;
  const json& v = body[name];
  bool typed = false;
  if constexpr (std::is_same_v<T, bool>) typed = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) typed = v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) typed = v.is_number();
  else typed = v.is_string();
  if (!typed || !ok(v.get<T>())) bad(name, std::string("must be ") + what);
  out = v.get<T>();
  return true;
}

// Fields with a meaning skim does not implement: refused unless they ask for the default.
void refuse_unsupported(const json& body) {
  int n = 1;
  read(body, "best_of", n, [](int x) { return x == 1; }, "1");
  for (const char* p : {"presence_penalty", "frequency_penalty"}) {
    double x = 0;
    read(body, p, x, [](double v) { return v == 0.0; }, "0 (penalties are not supported)");
  }
  if (body.contains("logit_bias") && !body["logit_bias"].is_null() && !body["logit_bias"].empty())
    bad("logit_bias", "not supported");
  if (body.contains("suffix") && !body["suffix"].is_null()) bad("suffix", "not supported");
}

std::vector<int> prompt_ids(const json& body, const ServedModel& m) {
  SKIM_REQUIRE(m.tokenizer != nullptr, "the model has no tokenizer.json");
  if (!body.contains("prompt")) bad("prompt", "required");
  json p = body["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) return m.tokenizer->encode_prompt(p.get<std::string>());  // (text kept by the caller)
  if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); })) {
    std::vector<int> ids;
    for (const json& x : p) {
      const int id = x.get<int>();
      if (id < 0 || id >= m.tokenizer->vocab_size())
        bad("prompt", "token id " + std::to_string(id) + " outside the vocabulary");
      ids.push_back(id);
    }
    return ids;
  }
  bad("prompt", "must be a string, a list of one string, or a list of token ids");
}

bool deeper_than(const json& j, int limit) {
  if (!j.is_structured()) return false;
  if (limit == 0) return true;
  return std::any_of(j.begin(), j.end(), [&](const json& x) { return deeper_than(x, limit - 1); });
}

// A field passed to the chat template as JSON: `as_written` (the same field of the raw body,
// object keys in the request's order, as transformers' callers' dicts keep them) when given,
// else the parsed field re-serialised (keys sorted). Deep nesting is refused first: copying
// it would recurse as deep.
nlohmann::ordered_json to_template(const json& j, const char* field, const nlohmann::ordered_json* as_written) {
  if (deeper_than(j, 64)) bad(field, "nested deeper than 64 levels");
  if (as_written) return *as_written;
  return nlohmann::ordered_json::parse(j.dump());
}

// body[name] (and [index]) of the raw body, or null when it is not there.
const nlohmann::ordered_json* written(const nlohmann::ordered_json& raw, const char* name, int index = -1) {
  if (!raw.is_object() || !raw.contains(name)) return nullptr;
  const nlohmann::ordered_json& v = raw[name];
  if (index < 0) return &v;
  return v.is_array() && size_t(index) < v.size() ? &v[size_t(index)] : nullptr;
}

// OpenAI sends a tool call's arguments as a JSON string; templates expect the object (as
// transformers' callers pass it, and as vLLM converts it), e.g. Llama 3.1's `arguments | tojson`.
void parse_tool_call_arguments(nlohmann::ordered_json& msg) {
  if (!msg.contains("tool_calls") || !msg["tool_calls"].is_array()) return;
  for (auto& call : msg["tool_calls"]) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    auto& f = call["function"];
    if (!f.contains("arguments") || !f["arguments"].is_string()) continue;
    auto parsed = nlohmann::ordered_json::parse(f["arguments"].get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) f["arguments"] = std::move(parsed);
  }
}

// The prompt of a chat request: the model's chat template over `messages` (as transformers
// receives them: content strings or content-part lists, tool messages, tool-call arguments as
// objects; "developer" read as "system"), `tools`, vLLM's `chat_template_kwargs` and
// `add_generation_prompt`; tokenized
// as apply_chat_template does (the template writes any BOS).
std::vector<int> chat_ids(const json& body, const ServedModel& m, const std::string& raw_body) {
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    bad("messages", "required, a non-empty list");
  const nlohmann::ordered_json raw =
      raw_body.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(raw_body, nullptr, false);
  ChatTemplateInputs in;
  int i = 0;
  for (const json& x : body["messages"]) {
    if (!x.is_object() || !x.contains("role") || !x["role"].is_string()) bad("messages", "each needs a string role");
    const json c = x.contains("content") ? x["content"] : json();
    if (!c.is_string() && !c.is_array() && !c.is_null()) bad("messages", "content must be a string or a list of parts");
    nlohmann::ordered_json msg = to_template(x, "messages", written(raw, "messages", i++));
    if (msg["role"] == "developer") msg["role"] = "system";
    parse_tool_call_arguments(msg);
    in.messages.push_back(std::move(msg));
  }
  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) bad("tools", "must be a list");
    in.tools = to_template(body["tools"], "tools", written(raw, "tools"));
  }
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    if (!body["chat_template_kwargs"].is_object()) bad("chat_template_kwargs", "must be an object");
    in.extra = to_template(body["chat_template_kwargs"], "chat_template_kwargs", written(raw, "chat_template_kwargs"));
  }
  read(body, "add_generation_prompt", in.add_generation_prompt, [](bool) { return true; }, "true or false");
  if (!m.chat)
    bad("messages", "this model has no chat template (chat_template.jinja or tokenizer_config.json chat_template; "
                    "skim serve --chat-template FILE): use /v1/completions");
  try {
    return m.tokenizer->encode(m.chat->render(in), true);
  } catch (const Error& e) {
    bad("messages", e.what());
  }
}

// max_tokens and the sampling fields, with OpenAI's defaults: completions stop at 16 tokens,
// chat at the end of the context (-1 here, resolved once the prompt's length is known).
void read_lengths_and_sampling(const json& body, Endpoint endpoint, GenerationRequest& r) {
  SamplingParams& s = r.sampling;
  r.max_tokens = endpoint == Endpoint::kChat ? -1 : 16;
  s.temperature = 1.0f;
  const char* max_field =
      endpoint == Endpoint::kChat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  read(body, max_field, r.max_tokens, [](int x) { return x >= 0; }, "an integer >= 0");
  double t = s.temperature, top_p = s.top_p;
  read(body, "temperature", t, [](double x) { return x >= 0 && x <= 2; }, "a number in [0, 2]");
  read(body, "top_p", top_p, [](double x) { return x > 0 && x <= 1; }, "a number in (0, 1]");
  s.temperature = float(t);
  s.top_p = float(top_p);
  read(body, "top_k", s.top_k, [](int x) { return x >= 0; }, "an integer >= 0");
  int64_t seed = 0;
  if (read(body, "seed", seed, [](int64_t) { return true; }, "an integer"))
    s.seed = uint64_t(seed);
  else
    s.seed = std::random_device{}();  // unseeded requests sample differently each time
}

// Completions: `logprobs` = n alternatives, `echo` (the prompt's text, and its tokens'
// log-probabilities with logprobs). Chat: `logprobs` = true with `top_logprobs` = n.
void read_logprobs(const json& body, Endpoint endpoint, const ServedModel& m, ParsedRequest& out) {
  GenerationRequest& r = out.request;
  if (endpoint == Endpoint::kChat) {
    bool want = false;
    read(body, "logprobs", want, [](bool) { return true; }, "true or false");
    int top = 0;
    const bool has_top = read(body, "top_logprobs", top, [](int x) { return x >= 0 && x <= 20; }, "an integer in [0, 20]");
    if (has_top && !want) bad("top_logprobs", "needs logprobs: true");
    if (want) r.logprobs = top;
  } else {
    read(body, "logprobs", r.logprobs, [](int x) { return x >= 0 && x <= 20; }, "an integer in [0, 20]");
    read(body, "echo", out.echo, [](bool) { return true; }, "true or false");
    r.echo_logprobs = out.echo;
  }
  if (r.logprobs >= 0 && !m.logprobs)
    bad("logprobs", "computed on the CPU path only so far (this server samples on the GPU)");
  if (r.echo_logprobs && r.logprobs >= 0 && out.stream)
    bad("echo", "the prompt's log-probabilities are not streamed yet (drop stream, or echo)");
}

void read_stop(const json& body, GenerationRequest& r) {
  if (!body.contains("stop") || body["stop"].is_null()) return;
  const json& st = body["stop"];
  if (st.is_string()) {
    r.stop.push_back(st.get<std::string>());
  } else if (st.is_array() && st.size() <= 4 &&
             std::all_of(st.begin(), st.end(), [](const json& x) { return x.is_string(); })) {
    for (const json& x : st) r.stop.push_back(x.get<std::string>());
  } else {
    bad("stop", "must be a string or a list of up to 4 strings");
  }
}

}  // namespace

ParsedRequest parse_request(const json& body, Endpoint endpoint, const ServedModel& m, const std::string& raw_body) {
  if (!body.is_object()) throw RequestError("the body must be a JSON object", "");
  std::string model;
  if (read(body, "model", model, [](const std::string&) { return true; }, "a string") && model != m.name)
    throw RequestError("model '" + model + "' is not served here; this server serves '" + m.name + "'", "model", 404);
  refuse_unsupported(body);

  ParsedRequest out;
  GenerationRequest& r = out.request;
  read_lengths_and_sampling(body, endpoint, r);
  read(body, "n", out.n, [](int x) { return x >= 1 && x <= 16; }, "an integer in [1, 16]");
  read(body, "ignore_eos", r.ignore_eos, [](bool) { return true; }, "true or false");
  read(body, "stream", out.stream, [](bool) { return true; }, "true or false");
  read_logprobs(body, endpoint, m, out);
  read(body, "policy", out.policy, [](const std::string& p) { return !p.empty(); }, "a policy string");
  read_stop(body, r);
  r.prompt_ids = endpoint == Endpoint::kChat ? chat_ids(body, m, raw_body) : prompt_ids(body, m);
  if (out.echo) {
    const json& p = body["prompt"];
    const json& one = p.is_array() && p.size() == 1 && p[0].is_string() ? p[0] : p;
    out.prompt_text = one.is_string() ? one.get<std::string>() : m.tokenizer->decode(r.prompt_ids);
  }
  if (r.prompt_ids.empty()) bad(endpoint == Endpoint::kChat ? "messages" : "prompt", "empty prompt");
  if (r.max_tokens < 0) r.max_tokens = std::max(0, m.max_context - int(r.prompt_ids.size()) + 1);
  if (int(r.prompt_ids.size()) > m.max_context)
    throw RequestError("the prompt has " + std::to_string(r.prompt_ids.size()) + " tokens; this server's context is " +
                           std::to_string(m.max_context) + " tokens (skim serve --ctx)",
                       endpoint == Endpoint::kChat ? "messages" : "prompt");
  return out;
}

namespace {

json bytes_of(const std::string& t) {
  json b = json::array();
  for (unsigned char c : t) b.push_back(int(c));
  return b;
}

// Completions' logprobs: parallel lists; add() appends one token (lp null: none, the first
// prompt token's).
struct CompletionLogprobs {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  void add(int id, const TokenLogprob* lp, int top_n, const Tokenizer& tok, size_t& offset) {
    const std::string t = tok.token_bytes(id);
    tokens.push_back(t);
    lps.push_back(lp ? json(lp->logprob) : json());
    json top = json::object();
    if (lp)
      for (const auto& [alt, v] : lp->top) top[tok.token_bytes(alt)] = v;
    tops.push_back(lp && top_n > 0 ? top : json());
    offsets.push_back(offset);
    offset += t.size();
  }
  json object() const { return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}}; }
};

json completion_logprobs(const GenerationResult& res, const ParsedRequest& pr, const Tokenizer& tok) {
  CompletionLogprobs c;
  size_t offset = 0;
  const int top_n = pr.request.logprobs;
  if (pr.echo) {
    const std::vector<int>& ids = pr.request.prompt_ids;
    for (size_t i = 0; i < ids.size(); ++i)
      c.add(ids[i], i > 0 && i - 1 < res.prompt_logprobs.size() ? &res.prompt_logprobs[i - 1] : nullptr, top_n, tok, offset);
  }
  for (size_t i = 0; i < res.tokens.size(); ++i)
    c.add(res.tokens[i], i < res.logprobs.size() ? &res.logprobs[i] : nullptr, top_n, tok, offset);
  return c.object();
}

json chat_logprob(const TokenLogprob& lp, const Tokenizer& tok) {
  const std::string t = tok.token_bytes(lp.token);
  json top = json::array();
  for (const auto& [alt, v] : lp.top) {
    const std::string a = tok.token_bytes(alt);
    top.push_back({{"token", a}, {"logprob", v}, {"bytes", bytes_of(a)}});
  }
  return {{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}};
}

// Chat's logprobs object: one entry per generated token.
json chat_logprobs(std::span<const TokenLogprob> lps, const Tokenizer& tok) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) content.push_back(chat_logprob(lp, tok));
  return {{"content", content}};
}

}  // namespace

json completion_response(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                         std::span<const GenerationResult> results, const std::string& policy, const ParsedRequest& pr,
                         const Tokenizer& tok) {
  json choices = json::array();
  int generated = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& res = results[i];
    json choice = {{"index", i}, {"finish_reason", res.stats.finish_reason}, {"logprobs", nullptr}};
    if (endpoint == Endpoint::kChat)
      choice["message"] = {{"role", "assistant"}, {"content", res.text}};
    else
      choice["text"] = pr.echo ? pr.prompt_text + res.text : res.text;
    if (pr.request.logprobs >= 0)
      choice["logprobs"] = endpoint == Endpoint::kChat ? chat_logprobs(res.logprobs, tok) : completion_logprobs(res, pr, tok);
    choices.push_back(choice);
    generated += res.stats.generated_tokens;
  }
  const GenerationStats& s = results.front().stats;  // the timings of the first choice
  return {{"id", id},
          {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", choices},
          {"usage",
           {{"prompt_tokens", s.prompt_tokens},
            {"completion_tokens", generated},
            {"total_tokens", s.prompt_tokens + generated}}},
          {"skim",
           {{"policy", policy},
            {"prefill_seconds", s.prefill_seconds},
            {"decode_seconds", s.decode_seconds},
            {"kv_bytes_per_step", s.kv_bytes_per_step}}}};
}

json stream_logprobs(Endpoint endpoint, std::span<const TokenLogprob> tokens, int top_n, const Tokenizer& tok,
                     size_t& offset) {
  if (endpoint == Endpoint::kChat) return chat_logprobs(tokens, tok);
  CompletionLogprobs c;
  for (const TokenLogprob& lp : tokens) c.add(lp.token, &lp, top_n, tok, offset);
  return c.object();
}

json stream_chunk(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                  const std::string& text, const std::string& finish_reason, bool first, const json& logprobs,
                  int index) {
  json choice = {{"index", index}, {"finish_reason", finish_reason.empty() ? json() : json(finish_reason)}};
  if (endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  return {{"id", id},
          {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

json error_body(const std::string& message, const std::string& type, const std::string& param) {
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)}, {"code", nullptr}}}};
}

}  // namespace skim::server
