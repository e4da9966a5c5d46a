// The fp32 dot product the CPU kernels share (attention scores, cs's centroid and key scores):
// one definition, so every caller sums in the same (vectorised) order.
#pragma once

namespace skim {

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace skim
