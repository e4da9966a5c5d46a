// The attention state of one query head over a key set S: (o, lse) with o normalised over S
// and lse = log sum_{j in S} exp(q.k_j * scale). Two states over disjoint sets merge exactly
// and associatively; the empty set is (0, -inf). Every policy is built from attend + merge.
#pragma once

#include <cmath>
#include <limits>

namespace skim {

constexpr float kEmptyLse = -std::numeric_limits<float>::infinity();

// (o_a, lse_a) <- merge((o_a, lse_a), (o_b, lse_b)); d elements of o.
inline void merge_state(float* o_a, float& lse_a, const float* o_b, float lse_b, int d) {
  if (lse_b == kEmptyLse) return;
  if (lse_a == kEmptyLse) {
    for (int i = 0; i < d; ++i) o_a[i] = o_b[i];
    lse_a = lse_b;
    return;
  }
  float m = std::fmax(lse_a, lse_b);
  float wa = std::exp(lse_a - m), wb = std::exp(lse_b - m);
  float inv = 1.0f / (wa + wb);
  for (int i = 0; i < d; ++i) o_a[i] = (wa * o_a[i] + wb * o_b[i]) * inv;
  lse_a = m + std::log(wa + wb);
}

inline void clear_state(float* o, float& lse, int d) {
  for (int i = 0; i < d; ++i) o[i] = 0.0f;
  lse = kEmptyLse;
}

}  // namespace skim
