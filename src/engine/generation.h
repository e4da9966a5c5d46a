// One request's generation state, shared by Engine::generate and the server's scheduler:
// its sampler, the tokens and text so far, the stop rules (EOS, stop strings, max_tokens)
// and which bytes of the text are safe to stream.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "skim/engine.h"

namespace skim {

class Tokenizer;

class Generation {
 public:
  Generation(const GenerationRequest& request, const Tokenizer& tokenizer, std::vector<int> eos_ids);

  // Samples the next token from host logits, noting its log-probability when the request
  // asks for them (accept() records it with the token).
  int sample(std::span<const float> logits);
  // A token sampled elsewhere (the device) with its log-probability, when the request asks.
  void sampled(const TokenLogprob& logprob) { sampled_ = logprob; }
  // Takes a sampled token; returns true when the generation is finished (then
  // result().stats.finish_reason says why).
  bool accept(int token);
  // Text not yet streamed that can no longer change: held back are bytes that may still
  // become a stop string or finish a UTF-8 character, unless `final`.
  std::string take_text(bool final);

  Sampler& sampler() { return sampler_; }
  // tokens, text and finish_reason; the caller fills the other stats.
  GenerationResult& result() { return result_; }
  const GenerationRequest& request() const { return request_; }

 private:
  GenerationRequest request_;
  const Tokenizer* tokenizer_;
  std::vector<int> eos_ids_;
  Sampler sampler_;
  GenerationResult result_;
  size_t emitted_ = 0;  // bytes of the text already taken
  size_t hold_ = 0;     // longest stop string - 1
  std::optional<TokenLogprob> sampled_;  // of the token sample() returned last
};

// Whether a sequence's prompt and generated tokens (those in the cache, and the sampled one
// not yet fed) fill the engine's context: then it ends with finish_reason "length".
bool at_context_limit(const Engine& engine, int seq);

// One decode step of `seqs` (fed `tokens`), each sequence's next token drawn for its
// generation: on the GPU sampled on the device (only the tokens, and the log-probabilities a
// generation asks for, come back); on the CPU from the host logits.
std::vector<int> decode_step(Engine& engine, std::span<const int> seqs, std::span<const int> tokens,
                             std::span<Generation* const> generations);

}  // namespace skim
