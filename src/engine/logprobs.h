// Log-probabilities of tokens under a logits row (the log-softmax at temperature 1, as OpenAI
// reports them whatever the sampling temperature), and the most likely alternatives.
#pragma once

#include <span>
#include <utility>
#include <vector>

namespace skim {

struct TokenLogprob {
  int token = -1;
  float logprob = 0;                       // log p(token)
  std::vector<std::pair<int, float>> top;  // the `top` most likely tokens, most likely first
};

// log p(token) and the top_n most likely tokens (ties: lower id first) of one logits row.
TokenLogprob token_logprob(std::span<const float> logits, int token, int top_n);

// A prompt's log-probabilities: logits row i (of `vocab` floats) scores next[i], for every
// i < next.size(); appended to `out`.
void append_logprobs(std::span<const float> logits, size_t vocab, std::span<const int> next, int top_n,
                     std::vector<TokenLogprob>& out);

}  // namespace skim
