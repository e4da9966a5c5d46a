#include "backend/cpu/cs_kernels.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "backend/cpu/dot.h"
#include "backend/cpu/kmeans.h"
#include "backend/cpu/top_list.h"
#include "core/dtype.h"

namespace skim::cpu {

namespace {

// Steps 1-2 of search s: the chosen lists' entries summed per key into w.sums, the keys
// touched listed in w.touched_keys (and marked in w.touched).
void gather(const CsSelectArgs& a, int s, CsSelectScratch& w, CsSelectStats& stats) {
  const int d = a.head_dim, M = a.subspaces, C = a.centroids, ds = d / M, context = a.context[s];
  const float* q = a.queries + size_t(s) * d;
  const CsTablesView& t = a.tables[s];
  w.slice.resize(size_t(ds));
  w.cos.resize(size_t(C));
  w.order.resize(size_t(C));
  for (int m = 0; m < M; ++m) {
    std::copy_n(q + size_t(m) * ds, ds, w.slice.data());
    const float norm = normalize(w.slice.data(), ds);
    const float* centroids = t.centroids + size_t(m) * C * ds;
    for (int c = 0; c < C; ++c) w.cos[size_t(c)] = dot(centroids + size_t(c) * ds, w.slice.data(), ds);
    const int best = int(std::max_element(w.cos.begin(), w.cos.end()) - w.cos.begin());
    const float weight = a.score_dot ? norm : 1.0f;
    stats.subspace_searches += 1;
    stats.best_cos += w.cos[size_t(best)];
    int take = 1;
    if (w.cos[size_t(best)] < a.backoff) {  // off-manifold query: widen the search
      take = std::min(C, a.backoff_top);
      stats.backoffs += 1;
    }
    std::iota(w.order.begin(), w.order.end(), 0);
    std::partial_sort(w.order.begin(), w.order.begin() + take, w.order.end(), [&](int x, int y) {
      return w.cos[size_t(x)] > w.cos[size_t(y)] || (w.cos[size_t(x)] == w.cos[size_t(y)] && x < y);
    });
    for (int k = 0; k < take; ++k) {
      const size_t l = size_t(m) * C + size_t(w.order[size_t(k)]);
      const float floor = a.missing_mean ? t.tail[l] : 0.0f;
      const int n = t.list_size[l];
      stats.table_bytes += uint64_t(n) * top_list::kEntryBytes + (a.missing_mean ? sizeof(float) : 0);
      const int32_t* index = t.list_index + l * size_t(a.list_capacity);
      const uint16_t* score = t.list_score + l * size_t(a.list_capacity);
      for (int i = 0; i < n; ++i) {
        const int32_t key = index[i];
        if (key < 0 || key >= context) continue;
        if (!w.touched[size_t(key)]) {
          w.touched[size_t(key)] = 1;
          w.touched_keys.push_back(key);
        }
        w.sums[size_t(key)] += weight * (f16_to_f32(score[i]) - floor);
      }
    }
  }
}

// Step 3 of search s: the n_pick largest sums below window_begin (ties: the smaller position)
// into picks; returns their count.
int pick(const CsSelectArgs& a, int s, CsSelectScratch& w, int32_t* picks) {
  const int window_begin = a.window_begin[s], n_pick = a.n_pick[s];
  // The score of the n_pick-th best touched key below the window: an nth_element over the
  // sums as a contiguous array (no indirection), then how many of that score may go in.
  w.touched_sums.clear();
  for (int32_t k : w.touched_keys)
    if (k < window_begin) w.touched_sums.push_back(w.sums[size_t(k)]);
  float threshold = -INFINITY;
  size_t ties = w.touched_sums.size();
  if (size_t(n_pick) < w.touched_sums.size()) {
    if (n_pick == 0) return 0;
    std::nth_element(w.touched_sums.begin(), w.touched_sums.begin() + (n_pick - 1), w.touched_sums.end(),
                     std::greater<float>());
    threshold = w.touched_sums[size_t(n_pick - 1)];
    size_t above = 0;
    for (float v : w.touched_sums) above += v > threshold;
    ties = size_t(n_pick) - above;
  }
  // A scan of the positions below the window yields the picks by position, with no sort;
  // branch-free, since which keys are touched is unpredictable.
  size_t n = 0;
  for (int k = 0; k < window_begin; ++k) {
    const bool touched = w.touched[size_t(k)] != 0;
    const float v = w.sums[size_t(k)];
    const bool tie = touched & (v == threshold) & (ties > 0);
    picks[n] = k;
    n += size_t((touched & (v > threshold)) | tie);
    ties -= size_t(tie);
  }
  if (a.by_score)  // descending sum, ties by position: the order a traversal follows
    std::sort(picks, picks + n, [&](int32_t x, int32_t y) {
      return w.sums[size_t(x)] > w.sums[size_t(y)] || (w.sums[size_t(x)] == w.sums[size_t(y)] && x < y);
    });
  return int(n);
}

// The `top` largest of score[0..n) as (index, score), by descending score, ties by index: the
// order try-inserting them one by one would leave. A threshold by nth_element on the values,
// then a sort of the few kept, instead of a sort of all n.
void top_entries(const float* score, int n, int top, std::vector<int32_t>& index, std::vector<float>& kept) {
  index.clear();
  kept.clear();
  if (top <= 0) return;
  std::vector<float> v(score, score + n);
  std::nth_element(v.begin(), v.begin() + (top - 1), v.end(), std::greater<float>());
  const float threshold = v[size_t(top - 1)];
  for (int j = 0; j < n; ++j)
    if (score[j] > threshold) index.push_back(j);
  for (int j = 0; j < n && int(index.size()) < top; ++j)
    if (score[j] == threshold) index.push_back(j);
  std::sort(index.begin(), index.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  for (int32_t j : index) kept.push_back(score[j]);
}

}  // namespace

void cs_select(const CsSelectArgs& a, CsSelectScratch& w) {
  if (a.subspaces <= 0 || a.head_dim % a.subspaces != 0 || a.centroids <= 0 || a.list_capacity < 0 ||
      a.backoff_top < 1)
    throw std::invalid_argument("cs_select: bad shapes");
  CsSelectStats local;
  CsSelectStats& stats = a.stats ? *a.stats : local;
  for (int s = 0; s < a.searches; ++s) {
    if (a.skip && a.skip[s]) continue;  // keeps its last picks (a search period)
    const int context = a.context[s], window_begin = a.window_begin[s];
    if (window_begin < 0 || window_begin > context || window_begin > a.max_picks || a.n_pick[s] < 0)
      throw std::invalid_argument("cs_select: window_begin outside [0, context] or past max_picks");
    if (w.sums.size() < size_t(context)) {  // the sums and marks stay zero between searches
      w.sums.resize(size_t(context), 0.0f);
      w.touched.resize(size_t(context), 0);
    }
    gather(a, s, w, stats);
    stats.candidates += w.touched_keys.size();
    a.pick_counts[s] = pick(a, s, w, a.picks + size_t(s) * a.max_picks);
    if (a.candidates)
      std::copy_n(w.touched.begin(), context, a.candidates + size_t(s) * a.candidate_stride);
    for (int32_t k : w.touched_keys) {
      w.sums[size_t(k)] = 0.0f;
      w.touched[size_t(k)] = 0;
    }
    w.touched_keys.clear();
  }
}

void cs_insert(const CsInsertArgs& a) {
  if (a.subspaces <= 0 || a.head_dim % a.subspaces != 0 || a.centroids <= 0 || a.list_capacity < 0 ||
      (a.list_stride != 0 && a.list_stride < a.list_capacity))
    throw std::invalid_argument("cs_insert: bad shapes");
  const int M = a.subspaces, C = a.centroids, ds = a.head_dim / M;
  std::vector<float> k(static_cast<size_t>(ds));
  for (int m = 0; m < M; ++m) {
    std::copy_n(a.key + size_t(m) * ds, ds, k.data());
    if (!a.score_dot) normalize(k.data(), ds);
    for (int c = 0; c < C; ++c) {
      const size_t l = size_t(m) * C + c;
      const float score = dot(a.centroids_data + l * ds, k.data(), ds);
      if (a.admit && TopList::order_key(f32_to_f16(score)) <= a.admit[l]) continue;  // most keys: refused here
      TopList list(a.list_index + l * a.stride(), a.list_score + l * a.stride(), a.list_size + l, a.list_capacity);
      list.try_insert(a.position, score);
      if (a.admit) a.admit[l] = list.admit_key();
    }
  }
}

void cs_build(const CsBuildArgs& a) {
  if (a.subspaces <= 0 || a.head_dim % a.subspaces != 0 || a.centroids <= 0 || a.list_capacity < 1 ||
      (a.list_stride != 0 && a.list_stride < a.list_capacity) || a.subspace < 0 || a.subspace >= a.subspaces ||
      a.num_keys < 1 || a.num_vectors < 1 || a.max_points < 1)
    throw std::invalid_argument("cs_build: bad shapes or an empty prompt");
  const int d = a.head_dim, C = a.centroids, ds = d / a.subspaces, m = a.subspace, num_keys = a.num_keys;
  // k-means on a strided sample of the (query, head) vectors when there are many.
  const int stride = (a.num_vectors + a.max_points - 1) / a.max_points;
  const int n = (a.num_vectors + stride - 1) / stride;
  std::vector<float> pts(size_t(n) * ds);
  for (int i = 0; i < n; ++i) {
    float* x = pts.data() + size_t(i) * ds;
    std::copy_n(a.vectors + size_t(i) * stride * d + size_t(m) * ds, ds, x);
    normalize(x, ds);
  }
  KMeansResult km = cosine_kmeans(pts.data(), n, ds, C, a.iters, 0x5eed0000u + uint64_t(m));
  float* centroids = a.centroids_out + size_t(m) * C * ds;
  std::copy(km.centroids.begin(), km.centroids.end(), centroids);

  std::vector<float> keys(size_t(num_keys) * ds), score(size_t(C) * num_keys), kept;
  for (int j = 0; j < num_keys; ++j) {
    float* k = keys.data() + size_t(j) * ds;
    const size_t row = (size_t(a.pages[j / a.page_size]) * a.num_kv_heads + a.kv_head) * a.page_size + j % a.page_size;
    std::copy_n(a.k_pool + row * d + size_t(m) * ds, ds, k);
    if (!a.score_dot) normalize(k, ds);
  }
  centroid_scores(centroids, C, ds, keys.data(), num_keys, score.data());  // [C][num_keys]
  std::vector<int32_t> index;
  for (int c = 0; c < C; ++c) {
    const size_t l = size_t(m) * C + c;
    TopList list(a.list_index + l * a.stride(), a.list_score + l * a.stride(), a.list_size + l, a.list_capacity);
    const float* row = score.data() + size_t(c) * num_keys;
    top_entries(row, num_keys, std::min(list.capacity(), num_keys), index, kept);
    list.assign_sorted(index.data(), kept.data(), int(index.size()));
    double all = 0, in = 0;
    for (int j = 0; j < num_keys; ++j) all += row[j];
    for (float v : kept) in += v;
    const int left = num_keys - int(kept.size());
    a.tail[l] = left > 0 ? float((all - in) / left) : 0.0f;
  }
}

}  // namespace skim::cpu
