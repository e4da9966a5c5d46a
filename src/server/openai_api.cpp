#include "server/openai_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <random>

#include "core/error.h"
#include "engine/field_checks.h"
#include "tokenizer/tokenizer.h"

namespace skim::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(param + ": " + message, param);
}

bool present(const json& body, const char* name) { return body.contains(name) && !body[name].is_null(); }

// An integer field checked against its range (field_checks.h) in 64 bits, before it is
// narrowed: 2^32 + 5 is out of range, never 5. `name` is the JSON field, which may differ from
// the library's (max_completion_tokens is max_tokens).
template <class T>
bool read_int(const json& body, const char* name, const IntField& field, T& out) {
  if (!present(body, name)) return false;
  const json& v = body[name];
  if (!v.is_number_integer()) bad(name, fmt::format("must be an integer in [{}, {}]", field.lo, field.hi));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(name, fmt::format("must be an integer in [{}, {}], got {}", field.lo, field.hi, v.get<uint64_t>()));
  try {
    out = T(check_int(field, v.get<int64_t>()));
  } catch (const FieldError& e) {
    bad(name, e.detail);
  }
  return true;
}

bool read_real(const json& body, const char* name, const RealField& field, float& out) {
  if (!present(body, name)) return false;
  const json& v = body[name];
  if (!v.is_number()) bad(name, "must be a number");
  try {
    out = float(check_real(field, v.get<double>()));
  } catch (const FieldError& e) {
    bad(name, e.detail);
  }
  return true;
}

bool read_bool(const json& body, const char* name, bool& out) {
  if (!present(body, name)) return false;
  if (!body[name].is_boolean()) bad(name, "must be true or false");
  out = body[name].get<bool>();
  return true;
}

bool read_string(const json& body, const char* name, std::string& out) {
  if (!present(body, name)) return false;
  if (!body[name].is_string()) bad(name, "must be a string");
  out = body[name].get<std::string>();
  return true;
}

// OpenAI fields skim does not implement: refused unless they ask for the default, so that a
// client never gets an answer that silently ignored what it asked for.
void refuse_unsupported(const json& body) {
  int best_of = 1;
  read_int(body, "best_of", IntField{"best_of", 1, 1}, best_of);
  for (const char* p : {"presence_penalty", "frequency_penalty"}) {
    float x = 0;
    if (read_real(body, p, RealField{p, -2, 2}, x) && x != 0) bad(p, "must be 0 (penalties are not supported)");
  }
  if (present(body, "logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    bad("logit_bias", "not supported");
  for (const char* p : {"suffix", "functions", "function_call", "audio", "prediction"})
    if (present(body, p)) bad(p, "not supported");
  if (present(body, "response_format")) {
    const json& f = body["response_format"];
    if (!f.is_object() || f.value("type", json()) != "text")
      bad("response_format", "only {\"type\": \"text\"} is supported (no JSON mode or schemas)");
  }
  if (present(body, "modalities") && body["modalities"] != json::array({"text"}))
    bad("modalities", "only [\"text\"] is supported");
  if (present(body, "tool_choice")) {
    const json& t = body["tool_choice"];
    if (!(t.is_string() && (t == "none" || t == "auto")))
      bad("tool_choice", "only \"none\" and \"auto\" are supported (skim does not force tool calls)");
  }
}

// Fields that change nothing here but are type-checked, so a malformed one is an error.
void check_passive_fields(const json& body) {
  std::string text;
  bool flag = false;
  read_string(body, "user", text);
  read_string(body, "service_tier", text);
  read_bool(body, "store", flag);
  read_bool(body, "parallel_tool_calls", flag);
  if (present(body, "metadata") && !body["metadata"].is_object()) bad("metadata", "must be an object");
}

std::vector<int> prompt_ids(const json& body, const ServedModel& m) {
  SKIM_REQUIRE(m.tokenizer != nullptr, "the model has no tokenizer.json");
  if (!body.contains("prompt")) bad("prompt", "required");
  const json* p = &body["prompt"];
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) return encode_within_context(p->get_ref<const std::string&>(), m, "prompt");
  const bool ids = p->is_array() && !p->empty() &&
                   std::all_of(p->begin(), p->end(), [](const json& x) { return x.is_number_integer(); });
  if (!ids) bad("prompt", "must be a string, a list of one string, or a list of token ids");
  if (p->size() > size_t(m.max_context))
    bad("prompt", fmt::format("{} token ids; this server's context is {} tokens", p->size(), m.max_context));
  const IntField token{"token id", 0, int64_t(m.tokenizer->vocab_size()) - 1};
  std::vector<int> out;
  for (const json& x : *p) {
    if (x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(token.hi))
      bad("prompt", fmt::format("token id {} outside the vocabulary [0, {}]", x.get<uint64_t>(), token.hi));
    const int64_t id = x.get<int64_t>();
    if (id < token.lo || id > token.hi) bad("prompt", fmt::format("token id {} outside the vocabulary [0, {}]", id, token.hi));
    out.push_back(int(id));
  }
  return out;
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
  read_bool(body, "add_generation_prompt", in.add_generation_prompt);
  if (!m.chat)
    bad("messages", "this model has no chat template (chat_template.jinja or tokenizer_config.json chat_template; "
                    "skim serve --chat-template FILE): use /v1/completions");
  std::string text;
  try {
    text = m.chat->render(in);
  } catch (const Error& e) {
    throw RequestError(e.what(), "messages");
  }
  // The rendered chat carries its own special tokens (and BOS, where the template writes one):
  // tokenised as transformers does, adding none.
  return encode_within_context(text, m, "messages", /*rendered_chat=*/true);
}

// max_tokens and the sampling fields, with OpenAI's defaults: completions stop at 16 tokens,
// chat at the end of the context (-1 here, resolved once the prompt's length is known).
void read_lengths_and_sampling(const json& body, Endpoint endpoint, GenerationRequest& r) {
  SamplingParams& s = r.sampling;
  r.max_tokens = endpoint == Endpoint::kChat ? -1 : 16;
  s.temperature = 1.0f;
  const char* max_field =
      endpoint == Endpoint::kChat && present(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  read_int(body, max_field, fields::kMaxTokens, r.max_tokens);
  read_real(body, "temperature", fields::kTemperature, s.temperature);
  read_real(body, "top_p", fields::kTopP, s.top_p);
  read_int(body, "top_k", fields::kTopK, s.top_k);
  if (!read_int(body, "seed", fields::kSeed, s.seed)) s.seed = std::random_device{}();  // differs each time
}

// Completions: `logprobs` = n alternatives, `echo` (the prompt's text, and its tokens'
// log-probabilities with logprobs). Chat: `logprobs` = true with `top_logprobs` = n.
void read_logprobs(const json& body, Endpoint endpoint, ParsedRequest& out) {
  GenerationRequest& r = out.request;
  if (endpoint == Endpoint::kChat) {
    bool want = false;
    read_bool(body, "logprobs", want);
    int top = 0;
    const bool has_top = read_int(body, "top_logprobs", fields::kLogprobs, top);
    if (has_top && !want) bad("top_logprobs", "needs logprobs: true");
    if (want) r.logprobs = top;
  } else {
    read_int(body, "logprobs", fields::kLogprobs, r.logprobs);
    read_bool(body, "echo", out.echo);
    r.echo_logprobs = out.echo;
  }
  if (r.echo_logprobs && r.logprobs >= 0 && out.stream)
    bad("echo", "the prompt's log-probabilities are not streamed yet (drop stream, or echo)");
}

void read_stop(const json& body, GenerationRequest& r) {
  if (!present(body, "stop")) return;
  const json& st = body["stop"];
  const bool strings = st.is_string() || (st.is_array() && std::all_of(st.begin(), st.end(), [](const json& x) { return x.is_string(); }));
  if (!strings) bad("stop", fmt::format("must be a string or a list of up to {} strings", fields::kMaxStops));
  if (st.is_string()) r.stop.push_back(st.get<std::string>());
  else
    for (const json& x : st) r.stop.push_back(x.get<std::string>());
}

void read_stream(const json& body, ParsedRequest& out) {
  read_bool(body, "stream", out.stream);
  if (!present(body, "stream_options")) return;
  const json& o = body["stream_options"];
  if (!o.is_object()) bad("stream_options", "must be an object such as {\"include_usage\": true}");
  if (!out.stream) bad("stream_options", "only with stream: true");
  for (const auto& [key, value] : o.items())
    if (key != "include_usage") bad("stream_options", fmt::format("unknown option '{}' (include_usage is known)", key));
  if (o.contains("include_usage") && !o["include_usage"].is_boolean())
    bad("stream_options", "include_usage must be true or false");
  out.include_usage = o.value("include_usage", false);
}

// The rest of a request once its prompt is known: max_tokens within the context left, and the
// library's own checks (the same the CLI runs).
void fit_to_context(ParsedRequest& out, Endpoint endpoint, const ServedModel& m) {
  GenerationRequest& r = out.request;
  const char* prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  const int prompt = int(r.prompt_ids.size());
  if (prompt == 0) bad(prompt_field, "empty prompt");
  if (prompt >= m.max_context)
    throw RequestError(fmt::format("{}: the prompt has {} tokens; this server's context is {} tokens, and at least "
                                   "one must be left to generate",
                                   prompt_field, prompt, m.max_context),
                       prompt_field);
  const int room = m.max_context - prompt;
  if (r.max_tokens < 0) r.max_tokens = room;  // chat's default: the rest of the context
  if (r.max_tokens > room)
    bad("max_tokens", fmt::format("{} tokens asked for, but the prompt's {} tokens leave {} of this server's context of {}",
                    r.max_tokens, prompt, room, m.max_context));
  try {
    check_request(r);
  } catch (const FieldError& e) {
    bad(e.field, e.detail);
  }
}

}  // namespace

std::vector<int> encode_within_context(const std::string& text, const ServedModel& m, const char* field,
                                       bool rendered_chat) {
  // Every token spells at most max_token_bytes bytes, so a text longer than the context times
  // that cannot fit: refused before tokenising it (which costs time and memory).
  if (m.max_token_bytes > 0 && text.size() > size_t(m.max_context) * size_t(m.max_token_bytes))
    bad(field, fmt::format("{} bytes of text cannot fit this server's context of {} tokens", text.size(), m.max_context));
  return rendered_chat ? m.tokenizer->encode(text, true) : m.tokenizer->encode_prompt(text);
}

json parse_body(std::string_view text) {
  // The parser is iterative, but a deeply nested document would later be walked recursively
  // (copies, dumps): nesting is refused while parsing, before anything deep is built.
  bool too_deep = false;
  json::parser_callback_t limit_depth = [&too_deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= kMaxJsonDepth)
      too_deep = true;
    return !too_deep;
  };
  json body = json::parse(text, limit_depth, false);
  if (too_deep) throw RequestError(fmt::format("the body nests deeper than {} levels", kMaxJsonDepth), "");
  if (body.is_discarded()) throw RequestError("the body is not valid JSON", "");
  return body;
}

ParsedRequest parse_request(const json& body, Endpoint endpoint, const ServedModel& m, const std::string& raw_body) {
  if (!body.is_object()) throw RequestError("the body must be a JSON object", "");
  std::string model;
  if (read_string(body, "model", model) && model != m.name)
    throw RequestError("model '" + model + "' is not served here; this server serves '" + m.name + "'", "model", 404);
  refuse_unsupported(body);
  check_passive_fields(body);

  ParsedRequest out;
  GenerationRequest& r = out.request;
  read_lengths_and_sampling(body, endpoint, r);
  read_int(body, "n", fields::kChoices, out.n);
  read_bool(body, "ignore_eos", r.ignore_eos);
  read_stream(body, out);
  read_logprobs(body, endpoint, out);
  if (read_string(body, "policy", out.policy) && out.policy.empty()) bad("policy", "must be a policy string such as dense");
  read_stop(body, r);
  r.prompt_ids = endpoint == Endpoint::kChat ? chat_ids(body, m, raw_body) : prompt_ids(body, m);
  if (out.echo) {
    const json& p = body["prompt"];
    const json& one = p.is_array() && p.size() == 1 && p[0].is_string() ? p[0] : p;
    out.prompt_text = one.is_string() ? one.get<std::string>() : m.tokenizer->decode(r.prompt_ids);
  }
  fit_to_context(out, endpoint, m);
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
