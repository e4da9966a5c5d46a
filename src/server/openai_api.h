// The OpenAI request and response bodies skim's server speaks: /v1/completions and
// /v1/chat/completions, JSON in and out, plus the server-sent-event chunks of a stream.
// Parsing throws RequestError, which names the field, for the server to return as 400.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "skim/engine.h"
#include "tokenizer/chat_template.h"

namespace skim::server {

struct RequestError : std::runtime_error {
  RequestError(const std::string& message, std::string param, int status = 400)
      : std::runtime_error(message), param(std::move(param)), status(status) {}
  std::string param;  // the body field at fault ("" when none)
  int status;
};

enum class Endpoint { kCompletions, kChat };

struct ParsedRequest {
  GenerationRequest request;  // prompt_ids filled (tokenised here); logprobs as asked
  std::string policy;         // "" = the server's
  bool stream = false;
  bool echo = false;          // completions: the reply's text starts with the prompt's
  std::string prompt_text;    // the prompt as given (echo)
  int n = 1;                  // choices: n generations of the prompt, seeds seed, seed + 1, ...
  bool include_usage = false; // stream_options.include_usage: a last chunk with the usage
};

// Request bodies may nest JSON this deep, no deeper.
inline constexpr int kMaxJsonDepth = 64;

// What a request is checked against.
struct ServedModel {
  std::string name;  // the "model" a request may name (absent: any)
  const Tokenizer* tokenizer = nullptr;
  std::shared_ptr<const ChatTemplate> chat;  // null: no chat template (completions only)
  int max_context = 0;
  int max_token_bytes = 0;  // the longest token's bytes (0: unknown): bounds a prompt's text
};

// The body as JSON; RequestError when it is not JSON or nests deeper than kMaxJsonDepth.
nlohmann::json parse_body(std::string_view text);
// A prompt's text tokenised; refused (RequestError naming `field`) without tokenising when its
// bytes cannot fit the context.
// A rendered chat (rendered_chat) is tokenised as transformers tokenises one: special tokens
// recognised, none added; a plain prompt gets the tokenizer's BOS.
std::vector<int> encode_within_context(const std::string& text, const ServedModel& model, const char* field,
                                       bool rendered_chat = false);

// Throws RequestError on a field of the wrong type or range, a feature skim does not serve
// (best_of > 1, penalties, logit_bias, suffix), another
// model's name, or a prompt longer than the context.
// `raw_body`: the body's text, when at hand: chat templates then see messages and tools with
// their keys in the request's order (else sorted, as `body` holds them).
ParsedRequest parse_request(const nlohmann::json& body, Endpoint endpoint, const ServedModel& model,
                            const std::string& raw_body = "");

// Response objects. `id` e.g. "cmpl-7"; `created` in Unix seconds; `request` as parsed (echo,
// logprobs); the tokenizer spells the tokens of logprobs.
nlohmann::json completion_response(Endpoint endpoint, const std::string& id, int64_t created,
                                   const std::string& model, std::span<const GenerationResult> choices,
                                   const std::string& policy, const ParsedRequest& request,
                                   const Tokenizer& tokenizer);
// One stream chunk: a piece of text (finish_reason null), or the last chunk (text empty,
// finish_reason set); for chat the first chunk carries the role.
// `logprobs` (may be null): the chunk's tokens' (stream_logprobs).
nlohmann::json stream_chunk(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                            const std::string& text, const std::string& finish_reason, bool first,
                            const nlohmann::json& logprobs = nullptr, int index = 0);
// The logprobs object of a stream chunk for `tokens`; `offset` (completions' text_offset)
// advances over their text.
nlohmann::json stream_logprobs(Endpoint endpoint, std::span<const TokenLogprob> tokens, int top_n,
                               const Tokenizer& tokenizer, size_t& offset);
nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = "");

}  // namespace skim::server
