#include "backend/cpu/attend.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/attention_state.h"
#include "backend/cpu/dot.h"

namespace skim {

namespace {

constexpr int kMaxGroup = 16;  // query heads per KV head handled in one pass
constexpr int kBlock = 64;     // tokens scored before the running max is rescaled

// The next block of up to kBlock key positions, walking the ranges in order: a block spans
// range boundaries, so scattered single keys (cs, retro) cost one rescale per kBlock keys as a
// contiguous run does, not one per key.
struct BlockCursor {
  std::span<const KeyRange> ranges;
  size_t range = 0;
  int pos = ranges.empty() ? 0 : ranges[0].begin;  // next position inside ranges[range]

  int next(int* block) {
    int n = 0;
    while (n < kBlock && range < ranges.size()) {
      const KeyRange& r = ranges[range];
      if (pos >= r.end) {  // ranges need not be sorted: each starts at its own begin
        if (++range < ranges.size()) pos = ranges[range].begin;
        continue;
      }
      const int take = std::min(kBlock - n, r.end - pos);
      for (int j = 0; j < take; ++j) block[n++] = pos++;
    }
    return n;
  }
};

// Scattered keys (single positions of a cs selection) defeat the hardware prefetcher: ask for
// a key's and value's cache lines a few keys before they are used.
constexpr int kPrefetchAhead = 8;

inline void prefetch_row(const float* row, int d) {
  for (int i = 0; i < d; i += 64 / int(sizeof(float))) __builtin_prefetch(row + i);
}

// Flash-style pass over the ranges for up to kMaxGroup heads: score a block of keys for every
// head, rescale the accumulators once per block, then accumulate p * v.
void attend_blocks(const float* q, int n_q, const SeqKV& kv, std::span<const KeyRange> ranges, float scale,
                   float* acc, float* m, float* l) {
  const int d = kv.layer.head_dim;
  float s[kMaxGroup][kBlock];
  int block[kBlock];
  BlockCursor cursor{ranges};
  for (int nb = cursor.next(block); nb > 0; nb = cursor.next(block)) {
    for (int j = 0; j < std::min(nb, kPrefetchAhead); ++j) {
      prefetch_row(kv.key(block[j]), d);
      prefetch_row(kv.value(block[j]), d);
    }
    for (int j = 0; j < nb; ++j) {
      if (j + kPrefetchAhead < nb) {
        prefetch_row(kv.key(block[j + kPrefetchAhead]), d);
        prefetch_row(kv.value(block[j + kPrefetchAhead]), d);
      }
      const float* k = kv.key(block[j]);
      for (int h = 0; h < n_q; ++h) s[h][j] = dot(q + size_t(h) * d, k, d) * scale;
    }
    for (int h = 0; h < n_q; ++h) {
      float bm = *std::max_element(s[h], s[h] + nb);
      float nm = std::max(m[h], bm);
      float corr = std::exp(m[h] - nm);  // exp(-inf) = 0 on the first block
      float sum = 0.0f;
      for (int j = 0; j < nb; ++j) {
        s[h][j] = std::exp(s[h][j] - nm);
        sum += s[h][j];
      }
      l[h] = l[h] * corr + sum;
      m[h] = nm;
      float* a = acc + size_t(h) * d;
#pragma omp simd
      for (int i = 0; i < d; ++i) a[i] *= corr;
    }
    for (int j = 0; j < nb; ++j) {
      const float* v = kv.value(block[j]);
      for (int h = 0; h < n_q; ++h) {
        float p = s[h][j];
        float* a = acc + size_t(h) * d;
#pragma omp simd
        for (int i = 0; i < d; ++i) a[i] += p * v[i];
      }
    }
  }
}

}  // namespace

std::vector<KeyRange> coalesce_ranges(std::vector<KeyRange> r) {
  std::sort(r.begin(), r.end(), [](KeyRange a, KeyRange b) { return a.begin < b.begin; });
  std::vector<KeyRange> out;
  for (KeyRange x : r) {
    if (x.end <= x.begin) continue;
    if (!out.empty() && out.back().end >= x.begin) {
      out.back().end = std::max(out.back().end, x.end);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

void attend(const float* q, int n_q, const SeqKV& kv, std::span<const KeyRange> ranges,
            float scale, float* o, float* lse) {
  const int d = kv.layer.head_dim;
  for (int h0 = 0; h0 < n_q; h0 += kMaxGroup) {
    int nh = std::min(kMaxGroup, n_q - h0);
    float m[kMaxGroup], l[kMaxGroup];
    std::fill_n(m, nh, kEmptyLse);
    std::fill_n(l, nh, 0.0f);
    float* acc = o + size_t(h0) * d;
    std::fill_n(acc, size_t(nh) * d, 0.0f);
    attend_blocks(q + size_t(h0) * d, nh, kv, ranges, scale, acc, m, l);
    for (int h = 0; h < nh; ++h) {
      if (l[h] == 0.0f) {
        lse[h0 + h] = kEmptyLse;
        continue;
      }
      float inv = 1.0f / l[h];
      for (int i = 0; i < d; ++i) acc[size_t(h) * d + i] *= inv;
      lse[h0 + h] = m[h] + std::log(l[h]);
    }
  }
}

void attend_reference(const float* q, int n_q, const SeqKV& kv, std::span<const KeyRange> ranges,
                      float scale, float* o, float* lse) {
  const int d = kv.layer.head_dim;
  for (int h = 0; h < n_q; ++h) {
    const float* qh = q + size_t(h) * d;
    double mx = -INFINITY;
    std::vector<double> scores;
    std::vector<int> pos;
    for (const KeyRange& r : ranges)
      for (int t = r.begin; t < r.end; ++t) {
        double s = 0;
        for (int i = 0; i < d; ++i) s += double(qh[i]) * kv.key(t)[i];
        scores.push_back(s * scale);
        pos.push_back(t);
        mx = std::max(mx, scores.back());
      }
    float* oh = o + size_t(h) * d;
    if (scores.empty()) {
      std::fill_n(oh, d, 0.0f);
      lse[h] = kEmptyLse;
      continue;
    }
    double z = 0;
    std::vector<double> acc(d, 0.0);
    for (size_t j = 0; j < scores.size(); ++j) {
      double p = std::exp(scores[j] - mx);
      z += p;
      for (int i = 0; i < d; ++i) acc[i] += p * kv.value(pos[j])[i];
    }
    for (int i = 0; i < d; ++i) oh[i] = float(acc[i] / z);
    lse[h] = float(mx + std::log(z));
  }
}

}  // namespace skim
