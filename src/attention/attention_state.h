// The attention state of one query head over a key set S: (o, lse) with o normalised over S
// and lse = log sum_{j in S} exp(q.k_j * scale). Two states over disjoint sets merge exactly
// and associatively; the empty set is (0, -inf). Every policy is built from attend + merge.
// Host and device: the CPU kernels and the CUDA kernels that merge two states (MAC's and
// Retro's merges) run this one merge_state.
#pragma once

#include <cmath>
#include <limits>

#include "core/host_device.h"

namespace skim {

constexpr float kEmptyLse = -std::numeric_limits<float>::infinity();

// (o_a, lse_a) <- merge((o_a, lse_a), (o_b, lse_b)); d elements of o (on the device, a thread's
// share of the head, a constant where it is inlined). An empty state weighs nothing, taken as a
// branch rather than a zero weight, so no 0 x inf or 0 x NaN ever enters o.
SKIM_HOST_DEVICE inline void merge_state(float* o_a, float& lse_a, const float* o_b, float lse_b, int d) {
  if (lse_b == kEmptyLse) return;
  if (lse_a == kEmptyLse) {
    for (int i = 0; i < d; ++i) o_a[i] = o_b[i];
    lse_a = lse_b;
    return;
  }
  const float m = fmaxf(lse_a, lse_b);
  const float wa = expf(lse_a - m), wb = expf(lse_b - m);
  const float inv = 1.0f / (wa + wb);
  for (int i = 0; i < d; ++i) o_a[i] = (wa * o_a[i] + wb * o_b[i]) * inv;
  lse_a = m + logf(wa + wb);
}

inline void clear_state(float* o, float& lse, int d) {
  for (int i = 0; i < d; ++i) o[i] = 0.0f;
  lse = kEmptyLse;
}

}  // namespace skim
