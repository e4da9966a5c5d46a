// Paged prefill attention on mma.sync (any GPU from sm_80): FlashAttention-2's loop with 4 warps
// of 16 or 32 rows (MT m16 tiles each) and 64-key steps, K/V fragments by ldmatrix. Device code,
// included by paged_prefill_attention.cu only.
#pragma once

#include "backend/cuda/paged_prefill_common.cuh"

namespace skim::cuda::prefill {

using detail::ldmatrix_x4;
using detail::ldmatrix_x4_trans;
using detail::mma_m16n8k16;

constexpr int kWarps = 4;

// A CTA's tile for head_dim D with MT m16 tiles per warp. Its rows are (token, query head)
// pairs of one KV head, packed token-major: row R is token R / group, head R % group of the
// group. The heads of a group share every K/V row, so they share the CTA's copy of it.
template <int D, int MT>
struct Tile {
  static constexpr int kKeys = 64;  // keys per step of the key loop: four pages
  static constexpr int kRows = kWarps * MT * 16;
  static constexpr int kWarpRows = MT * 16;
  static constexpr int kRowBytes = D * 2;
  static constexpr int kPieces = D / 8;  // 16-byte pieces of a row
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kKVBytes = kKeys * kRowBytes;  // one step's K (or V)
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes;  // Q, then K, V of two stages
  static constexpr int kThreads = kWarps * 32;
  // ldmatrix reads the same piece of 8 consecutive rows: piece c of row r sits at c ^ (r & 7),
  // so the 8 reads hit 8 different bank groups.
  __device__ static __forceinline__ uint32_t swz(int r, int c) {
    return uint32_t(r * kRowBytes + ((c ^ (r & 7)) << 4));
  }
};

// s = Q K^T for the warp's rows and the step's 64 keys: s[mt][j] holds keys 8j..8j+7 in the
// m16n8 accumulator layout. The B fragments of K serve all MT row tiles.
template <class T, int D, int MT>
__device__ __forceinline__ void compute_scores(uint32_t q_s, uint32_t k_s, int warp, int lane,
                                               float (&s)[MT][T::kKeys / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < T::kKeys / 8; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    uint32_t qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldmatrix_x4(qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3],
                  q_s + T::swz(warp * T::kWarpRows + mt * 16 + (lane & 15), 2 * kc + (lane >> 4)));
#pragma unroll
    for (int np = 0; np < T::kKeys / 16; ++np) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(b0, b1, b2, b3, k_s + T::swz(16 * np + ((lane >> 4) << 3) + (lane & 7), 2 * kc + ((lane >> 3) & 1)));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_m16n8k16(s[mt][2 * np], qa[mt], b0, b1);
        mma_m16n8k16(s[mt][2 * np + 1], qa[mt], b2, b3);
      }
    }
  }
}

// o += P V: the step's probabilities (registers) times its V rows (ldmatrix.trans gives the
// B fragments of V stored [key][dim]).
template <class T, int D, int MT>
__device__ __forceinline__ void accumulate_pv(const uint32_t (&p)[MT][T::kKeys / 8][2], uint32_t v_s, int lane,
                                              float (&o)[MT][D / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < T::kKeys / 16; ++kk) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = p[mt][2 * kk][0];
      pa[mt][1] = p[mt][2 * kk][1];
      pa[mt][2] = p[mt][2 * kk + 1][0];
      pa[mt][3] = p[mt][2 * kk + 1][1];
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(b0, b1, b2, b3, v_s + T::swz(16 * kk + (((lane >> 3) & 1) << 3) + (lane & 7), 2 * dp + (lane >> 4)));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_m16n8k16(o[mt][2 * dp], pa[mt], b0, b1);
        mma_m16n8k16(o[mt][2 * dp + 1], pa[mt], b2, b3);
      }
    }
  }
}

// Flash attention (FlashAttention-2's loop) over the paged cache: Q of the tile stays in shared
// memory, each step's K/V pages arrive by cp.async while the previous step computes, scores
// and P.V run on mma.sync with o, m and l in registers. One CTA per (row tile, KV head, split).
template <int D, int MT>
__global__ void __launch_bounds__(kWarps * 32) flash_prefill_kernel(PagedPrefillArgs a, Split sp) {
  using T = Tile<D, MT>;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_s = smem_addr(smem), kv_s = q_s + T::kQBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const CtaWork w = cta_work<T>(a, sp);
  if (w.idle) return;
  const float scale_log2 = a.scale * 1.4426950408889634f;

  start_loads<T>(a, w, q_s, kv_s);

  float o[MT][D / 8][4], m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
  }

  for (int step = w.begin; step < w.end; ++step) {
    const uint32_t k_s = next_stage<T, false>(a, w, kv_s, step), v_s = k_s + T::kKVBytes;
    float s[MT][T::kKeys / 8][4];
    compute_scores<T, D, MT>(q_s, k_s, warp, lane, s);
    if ((step + 1) * T::kKeys - 1 > w.min_pos) mask_scores<T, MT>(a, w, warp, lane, step * T::kKeys, s);
    uint32_t p[MT][T::kKeys / 8][2];
    update_softmax<D, MT, T::kKeys>(s, scale_log2, m, l, o, p);
    accumulate_pv<T, D, MT>(p, v_s, lane, o);
  }
  store_rows<T, D, MT>(a, w, sp, warp, lane, o, m, l);
}

}  // namespace skim::cuda::prefill
