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

}  // namespace skim
