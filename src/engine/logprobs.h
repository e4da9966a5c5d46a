// Log-probabilities of tokens under a logits row (TokenLogprob: skim/sampling.h).
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "skim/sampling.h"  // TokenLogprob

namespace skim {

// log p(token) and the top_n most likely tokens (ties: lower id first) of one logits row.
TokenLogprob token_logprob(std::span<const float> logits, int token, int top_n);

// A prompt's log-probabilities: logits row i (of `vocab` floats) scores next[i], for every
// i < next.size(); appended to `out`.
void append_logprobs(std::span<const float> logits, size_t vocab, std::span<const int> next, int top_n,
                     std::vector<TokenLogprob>& out);

}  // namespace skim
