// Quest's upper bound on q.k over a page from the page's element-wise key min and max:
// sum_i max(q_i * kmin_i, q_i * kmax_i). Used by Quest (per query head) and ReSA (pooled query).
#pragma once

#include <algorithm>
#include <vector>

#include "backend/cpu/attend.h"
#include "kv/kv_layer_view.h"

namespace skim {

inline float page_bound(const float* q, const float* kmin, const float* kmax, int d) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < d; ++i) s += std::max(q[i] * kmin[i], q[i] * kmax[i]);
  return s;
}

inline const float* page_kmin(const KVLayerView& v, int32_t page, int kv_head) {
  return v.kmin + (size_t(page) * v.num_kv_heads + kv_head) * v.head_dim;
}
inline const float* page_kmax(const KVLayerView& v, int32_t page, int kv_head) {
  return v.kmax + (size_t(page) * v.num_kv_heads + kv_head) * v.head_dim;
}

// The `n` highest-scoring page indices among scores[0..count), always including `forced`
// (when >= 0), in descending score order. Ties go to the lower index.
std::vector<int> top_pages(const std::vector<float>& scores, int n, int forced);

// Turns page indices of a sequence into key ranges clipped to `context` tokens.
std::vector<KeyRange> page_ranges(const std::vector<int>& pages, int page_size, int context);

}  // namespace skim
