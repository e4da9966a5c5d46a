#include "backend/cpu/causal_attend.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/mac_decode_args.h"
#include "attention/attention_state.h"

namespace skim {

namespace {

constexpr int kKeys = 64;     // keys per tile
constexpr int kQueries = 4;   // query vectors per micro-kernel pass
constexpr int kLanes = 16;    // floats per vector register (AVX-512; split on narrower ISAs)
// Unaligned vector type: tiles live in std::vector storage.
typedef float vfloat __attribute__((vector_size(kLanes * sizeof(float)), aligned(4)));
constexpr int kKeyVecs = kKeys / kLanes;

// Scores of up to kQueries queries against a tile of keys stored transposed (kt[i][j]):
// broadcasting q_i against rows of kt keeps every score in registers, no horizontal sums.
void score_tile(const float* const* q, int nq, const float* kt, int d, float s[kQueries][kKeys]) {
  vfloat acc[kQueries][kKeyVecs] = {};
  for (int i = 0; i < d; ++i) {
    const vfloat* row = reinterpret_cast<const vfloat*>(kt + size_t(i) * kKeys);
    for (int a = 0; a < kQueries; ++a) {
      if (a >= nq) break;
      float qi = q[a][i];
      for (int v = 0; v < kKeyVecs; ++v) acc[a][v] += qi * row[v];
    }
  }
  for (int a = 0; a < nq; ++a)
    for (int v = 0; v < kKeyVecs; ++v)
      for (int l = 0; l < kLanes; ++l) s[a][v * kLanes + l] = acc[a][v][l];
}

// The state over the keys before a tile (running max m, sum l, unnormalised acc) and the tile's
// first n keys (scaled scores s, n >= 1), into (o, lse); the running state is left as it is.
void prefix_state(const float* acc, float m, float l, const float* s, int n, const float* const* vrows, int d,
                  float* o, float& lse) {
  float nm = m;
  for (int j = 0; j < n; ++j) nm = std::max(nm, s[j]);
  const float corr = std::exp(m - nm);  // 0 when no key came before the tile
  float sum = l * corr;
  for (int i = 0; i < d; ++i) o[i] = acc[i] * corr;
  for (int j = 0; j < n; ++j) {
    const float p = std::exp(s[j] - nm);
    sum += p;
    const float* vr = vrows[j];
#pragma omp simd
    for (int i = 0; i < d; ++i) o[i] += p * vr[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < d; ++i) o[i] *= inv;
  lse = nm + std::log(sum);
}

}  // namespace

void attend_causal(const CausalRun& run, const SeqKV& kv, float scale) {
  const int d = kv.layer.head_dim;
  const int last_pos = run.first_pos + run.rows - 1;
  // Query vectors in (row, head) order; row of vector v is v / group.
  const int nvec = run.rows * run.group;
  std::vector<float> m(size_t(nvec), kEmptyLse), l(size_t(nvec), 0.0f);
  std::vector<float> acc(size_t(nvec) * d, 0.0f);
  std::vector<float> kt(size_t(d) * kKeys);
  std::vector<const float*> vrows(kKeys);
  float s[kQueries][kKeys];
  // A prefix that ends before the first key is the empty state; the others are written in the
  // tile where they end.
  auto prefix_at = [&](int vec, float*& o, float*& lse) {
    const int r = vec / run.group, g = vec % run.group;
    o = run.prefix_o + size_t(r) * run.row_stride + size_t(g) * d;
    lse = run.prefix_lse + size_t(r) * run.lse_stride + g;
  };
  if (run.prefix_o)
    for (int vec = 0; vec < nvec; ++vec) {
      float *o, *lse;
      prefix_at(vec, o, lse);
      clear_state(o, *lse, d);
    }

  for (int k0 = 0; k0 <= last_pos; k0 += kKeys) {
    const int nk = std::min(kKeys, last_pos + 1 - k0);
    for (int j = 0; j < kKeys; ++j) {
      const float* k = j < nk ? kv.key(k0 + j) : nullptr;
      for (int i = 0; i < d; ++i) kt[size_t(i) * kKeys + j] = k ? k[i] : 0.0f;
      vrows[size_t(j)] = j < nk ? kv.value(k0 + j) : nullptr;
    }
    // Query vectors whose row can see at least the tile's first key.
    const int first_row = std::max(0, k0 - run.first_pos);
    for (int v0 = first_row * run.group; v0 < nvec; v0 += kQueries) {
      const int nq = std::min(kQueries, nvec - v0);
      const float* qs[kQueries];
      for (int a = 0; a < nq; ++a) {
        int r = (v0 + a) / run.group, g = (v0 + a) % run.group;
        qs[a] = run.q + size_t(r) * run.row_stride + size_t(g) * d;
      }
      score_tile(qs, nq, kt.data(), d, s);
      for (int a = 0; a < nq; ++a) {
        const int vec = v0 + a, pos = run.first_pos + vec / run.group;
        const int visible = std::min(nk, pos - k0 + 1);  // causal mask inside the tile
        float bm = kEmptyLse;
        for (int j = 0; j < visible; ++j) bm = std::max(bm, s[a][j] *= scale);
        const int prefix_keys = mac_prefix_end(pos, run.prefix_band, run.prefix_page) - k0;  // of this tile, when it ends here
        if (run.prefix_o && prefix_keys > 0 && prefix_keys <= nk) {
          float *o, *lse;
          prefix_at(vec, o, lse);
          prefix_state(acc.data() + size_t(vec) * d, m[size_t(vec)], l[size_t(vec)], s[a], prefix_keys, vrows.data(), d,
                       o, *lse);
        }
        const float nm = std::max(m[size_t(vec)], bm);
        const float corr = std::exp(m[size_t(vec)] - nm);
        float sum = 0.0f;
        for (int j = 0; j < visible; ++j) sum += s[a][j] = std::exp(s[a][j] - nm);
        l[size_t(vec)] = l[size_t(vec)] * corr + sum;
        m[size_t(vec)] = nm;
        float* o = acc.data() + size_t(vec) * d;
        for (int i = 0; i < d; ++i) o[i] *= corr;
        for (int j = 0; j < visible; ++j) {
          const float p = s[a][j];
          const float* vr = vrows[size_t(j)];
#pragma omp simd
          for (int i = 0; i < d; ++i) o[i] += p * vr[i];
        }
      }
    }
  }
  for (int vec = 0; vec < nvec; ++vec) {
    int r = vec / run.group, g = vec % run.group;
    float* o = run.out + size_t(r) * run.row_stride + size_t(g) * d;
    const float inv = 1.0f / l[size_t(vec)];
    for (int i = 0; i < d; ++i) o[i] = acc[size_t(vec) * d + i] * inv;
  }
}

}  // namespace skim
