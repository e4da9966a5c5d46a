#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace skim {

TokenLogprob token_logprob(std::span<const float> logits, int token, int top_n) {
  // log-softmax with the max subtracted; the sum in double (a 128K vocabulary).
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - mx);
  const float log_z = mx + float(std::log(sum));
  TokenLogprob out;
  out.token = token;
  out.logprob = logits[size_t(token)] - log_z;
  top_n = std::min<int>(top_n, int(logits.size()));
  if (top_n > 0) {
    std::vector<int> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top_n, ids.end(), [&](int a, int b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    for (int i = 0; i < top_n; ++i) out.top.emplace_back(ids[size_t(i)], logits[size_t(ids[size_t(i)])] - log_z);
  }
  return out;
}

void append_logprobs(std::span<const float> logits, size_t vocab, std::span<const int> next, int top_n,
                     std::vector<TokenLogprob>& out) {
  for (size_t i = 0; i < next.size(); ++i) out.push_back(token_logprob(logits.subspan(i * vocab, vocab), next[i], top_n));
}

}  // namespace skim
