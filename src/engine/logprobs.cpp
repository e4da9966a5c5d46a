#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/token_logprobs.h"

namespace skim {

TokenLogprob token_logprob(std::span<const float> logits, int token, int top_n) {
  top_n = std::clamp(std::min(top_n, int(logits.size())), 0, kMaxTopLogprobs);
  float logprob = 0, top_logprobs[kMaxTopLogprobs];
  int32_t top_ids[kMaxTopLogprobs];
  const int32_t tok = token, n = top_n;
  cpu::token_logprobs({.rows = 1, .vocab = int(logits.size()), .logits = logits.data(), .tokens = &tok,
                       .top_n = &n, .logprob = &logprob, .top_ids = top_ids, .top_logprobs = top_logprobs});
  TokenLogprob out;
  out.token = token;
  out.logprob = logprob;
  for (int i = 0; i < top_n; ++i) out.top.emplace_back(top_ids[i], top_logprobs[i]);
  return out;
}

void append_logprobs(std::span<const float> logits, size_t vocab, std::span<const int> next, int top_n,
                     std::vector<TokenLogprob>& out) {
  for (size_t i = 0; i < next.size(); ++i) out.push_back(token_logprob(logits.subspan(i * vocab, vocab), next[i], top_n));
}

}  // namespace skim
