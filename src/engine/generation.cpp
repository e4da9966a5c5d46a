#include "engine/generation.h"
#include "engine/logprobs.h"

#include <algorithm>

#include "engine/utf8.h"
#include "tokenizer/tokenizer.h"

namespace skim {

Generation::Generation(const GenerationRequest& request, const Tokenizer& tokenizer,
                       std::vector<int> eos_ids)
    : request_(request), tokenizer_(&tokenizer), eos_ids_(std::move(eos_ids)), sampler_(request.sampling) {
  for (const std::string& s : request_.stop) hold_ = std::max(hold_, s.size() > 0 ? s.size() - 1 : 0);
}

int Generation::sample(std::span<const float> logits) {
  const int token = sampler_.sample(logits);
  sampled_.reset();
  if (request_.logprobs >= 0) sampled_ = token_logprob(logits, token, request_.logprobs);
  return token;
}

bool Generation::accept(int token) {
  GenerationResult& res = result_;
  const bool eos = std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  if (eos && !request_.ignore_eos) {
    res.stats.finish_reason = "stop";
    return true;
  }
  res.tokens.push_back(token);
  if (sampled_ && sampled_->token == token) res.logprobs.push_back(*sampled_);
  sampled_.reset();
  const size_t before = res.text.size();
  res.text += tokenizer_->token_bytes(token);
  for (const std::string& stop : request_.stop) {
    if (stop.empty()) continue;
    const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
    const size_t at = res.text.find(stop, from);
    if (at != std::string::npos) {
      res.text.resize(at);
      res.stats.finish_reason = "stop";
      return true;
    }
  }
  if (int(res.tokens.size()) >= request_.max_tokens) {
    res.stats.finish_reason = "length";
    return true;
  }
  return false;
}

std::string Generation::take_text(bool final) {
  const std::string& text = result_.text;
  size_t end = final ? text.size() : (text.size() > hold_ ? text.size() - hold_ : 0);
  if (!final) end = utf8_complete_prefix(std::string_view(text).substr(0, end));
  if (end <= emitted_) return {};
  std::string piece = text.substr(emitted_, end - emitted_);
  emitted_ = end;
  return final ? utf8_sanitize(piece) : piece;
}

bool at_context_limit(const Engine& engine, int seq) { return engine.sequence_length(seq) + 1 >= engine.max_context(); }

std::vector<int> decode_step(Engine& engine, std::span<const int> seqs, std::span<const int> tokens,
                             std::span<Generation* const> generations) {
  std::vector<int> next;
  if (engine.on_gpu()) {
    std::vector<Sampler*> samplers;
    std::vector<int> top_logprobs;
    for (Generation* g : generations) {
      samplers.push_back(&g->sampler());
      top_logprobs.push_back(g->request().logprobs);
    }
    std::vector<TokenLogprob> logprobs;
    next = engine.decode_sample(seqs, tokens, samplers, top_logprobs, &logprobs);
    for (size_t j = 0; j < generations.size(); ++j)
      if (top_logprobs[j] >= 0) generations[j]->sampled(logprobs[j]);
    return next;
  }
  const std::vector<float> logits = engine.decode(seqs, tokens);
  const size_t vocab = logits.size() / std::max<size_t>(generations.size(), 1);
  for (size_t j = 0; j < generations.size(); ++j)
    next.push_back(generations[j]->sample(std::span<const float>(logits.data() + j * vocab, vocab)));
  return next;
}

}  // namespace skim
