// The plain definition of one query head's attention state, the part every CPU reference
// kernel of a CUDA kernel shares (paged_decode_attention, token_decode_attention): scores in
// double, their maximum first so that no exponential overflows, then o = sum_j softmax_j v_j
// and lse = log sum_j exp(score_j). bf16 inputs are widened exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace skim::cpu {

// q: head_dim fp32; key(j) / value(j): bf16 rows of key j of n. An empty set gives (0, -inf).
// s: scratch, reused across calls.
template <class KeyRow, class ValueRow>
void definition_state(const float* q, int d, float scale, int n, KeyRow key, ValueRow value, std::vector<double>& s,
                      float* o, float& lse) {
  if (n == 0) {
    for (int i = 0; i < d; ++i) o[i] = 0.0f;
    lse = -std::numeric_limits<float>::infinity();
    return;
  }
  s.assign(size_t(n), 0.0);
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < n; ++j) {
    const uint16_t* k = key(j);
    double dot = 0.0;
    for (int i = 0; i < d; ++i) dot += double(q[i]) * double(bf16_to_f32(k[i]));
    s[size_t(j)] = dot * double(scale);
    m = std::fmax(m, s[size_t(j)]);
  }
  std::vector<double> acc(size_t(d), 0.0);
  double sum = 0.0;
  for (int j = 0; j < n; ++j) {
    const double p = std::exp(s[size_t(j)] - m);
    sum += p;
    const uint16_t* v = value(j);
    for (int i = 0; i < d; ++i) acc[size_t(i)] += p * double(bf16_to_f32(v[i]));
  }
  for (int i = 0; i < d; ++i) o[i] = float(acc[size_t(i)] / sum);
  lse = float(m + std::log(sum));
}

}  // namespace skim::cpu
