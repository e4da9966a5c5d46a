#include "backend/cpu/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace skim::cpu {

void token_logprobs(const TokenLogprobsArgs& a) {
  if (a.rows < 0 || a.vocab <= 0) throw std::invalid_argument("token_logprobs: bad shapes");
  std::vector<int> ids(static_cast<size_t>(a.vocab));
  for (int r = 0; r < a.rows; ++r) {
    const int n = a.top_n[r];
    if (n < 0) continue;
    if (n > kMaxTopLogprobs || a.tokens[r] < 0 || a.tokens[r] >= a.vocab)
      throw std::invalid_argument("token_logprobs: token or top_n out of range");
    const float* l = a.logits + size_t(r) * a.vocab;
    // log-softmax with the max subtracted; the sum in double (a 128K vocabulary).
    const float mx = *std::max_element(l, l + a.vocab);
    double sum = 0;
    for (int i = 0; i < a.vocab; ++i) sum += std::exp(double(l[i]) - mx);
    const float log_z = mx + float(std::log(sum));
    a.logprob[r] = l[a.tokens[r]] - log_z;
    const int top = std::min(n, a.vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top, ids.end(),
                      [&](int x, int y) { return l[x] > l[y] || (l[x] == l[y] && x < y); });
    for (int i = 0; i < top; ++i) {
      a.top_ids[size_t(r) * kMaxTopLogprobs + i] = ids[size_t(i)];
      a.top_logprobs[size_t(r) * kMaxTopLogprobs + i] = l[ids[size_t(i)]] - log_z;
    }
  }
}

}  // namespace skim::cpu
