// Paged prefill attention on wgmma (Hopper, sm_90a). Device code, included by
// paged_prefill_attention.cu only; without sm_90a code its kernel traps (the host launches it
// only where wgmma_available() says it was built for the device).
#pragma once

#include "backend/cuda/paged_prefill_common.cuh"
#include "backend/cuda/wgmma.cuh"

namespace skim::cuda::prefill {

// The Hopper form: two warpgroups of 64 rows each (128 rows per CTA), 128 keys per step,
// S = Q K^T and O += P V on wgmma. Each operand tile is stored as 64-element column halves
// ([half][row][64], 128 bytes a row, 128-byte swizzle: piece c of row r at c ^ (r & 7)), the
// layout wgmma's descriptors read; Q, K (K-major) and V (N-major: its descriptor transposes).
template <int D>
struct TileSm90 {
  static constexpr int kRows = 128, kKeys = 128, kWarpRows = 16, kThreads = 256;
  static constexpr int kRowBytes = D * 2, kPieces = D / 8;
  static constexpr int kHalfBytes = 128 * 128;  // one 64-column half of a 128-row (or key) tile
  static constexpr int kQBytes = kRows * D * 2, kKVBytes = kKeys * D * 2;
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes + 1024;  // + alignment to 1024
  __device__ static __forceinline__ uint32_t swz(int r, int c) {
    return uint32_t((c >> 3) * kHalfBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4));
  }
};

// Issues s = Q K^T for the warpgroup's 64 rows and the step's 128 keys (d / 16 wgmma k-steps),
// uncommitted: s is in flight until the caller's commit and wait.
template <int D>
__device__ __forceinline__ void issue_scores_sm90(uint32_t q_s, uint32_t k_s, int wg, float (&s)[64]) {
  using T = TileSm90<D>;
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.0f;  // the first k-step overwrites them; no undefined reads
  detail::wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    const uint32_t half = (kc / 4) * T::kHalfBytes, kstep = (kc % 4) * 32;
    detail::wgmma_m64n128k16_ss(s, detail::sw128_desc(q_s + half + wg * 64 * 128 + kstep, 16, 1024),
                                detail::sw128_desc(k_s + half + kstep, 16, 1024), kc > 0);
  }
}

// Issues o += P V over a step's 128 keys, uncommitted: P from registers (the scores' layout is
// wgmma's A fragment), V N-major: its two 64-column halves kHalfBytes apart, groups of 8 keys
// 1024 apart.
template <int D>
__device__ __forceinline__ void issue_pv_sm90(const uint32_t (&p)[1][16][2], uint32_t v_s, float (&o)[D / 2]) {
  using T = TileSm90<D>;
  detail::fence_registers(o);
  detail::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const uint32_t a[4] = {p[0][2 * kk][0], p[0][2 * kk][1], p[0][2 * kk + 1][0], p[0][2 * kk + 1][1]};
    const uint64_t desc = detail::sw128_desc(v_s + kk * 16 * 128, T::kHalfBytes, 1024);
    if constexpr (D == 128)
      detail::wgmma_m64n128k16_rs(o, a, desc);
    else
      detail::wgmma_m64n64k16_rs(o, a, desc);
  }
}

// Commits what the warpgroup issued and waits for it; the accumulators are then final here.
template <int... N>
__device__ __forceinline__ void finish_mma(float (&... acc)[N]) {
  detail::wgmma_commit();
  detail::wgmma_wait<0>();
  (detail::fence_registers(acc), ...);
}

template <int D>
__device__ __forceinline__ void scores_sm90(uint32_t q_s, uint32_t k_s, int wg, float (&s)[64]) {
  issue_scores_sm90<D>(q_s, k_s, wg, s);
  finish_mma(s);
}

template <int D>
__device__ __forceinline__ void pv_sm90(const uint32_t (&p)[1][16][2], uint32_t v_s, float (&o)[D / 2]) {
  issue_pv_sm90<D>(p, v_s, o);
  finish_mma(o);
}

// FlashAttention's loop on Hopper: as flash_prefill_kernel, with a warpgroup per 64 rows and
// the MMAs on wgmma. The softmax and the row bookkeeping are the mma.sync kernel's (one 16-row
// tile per warp).
template <int D>
__global__ void __launch_bounds__(256, 1) flash_prefill_sm90_kernel(PagedPrefillArgs a, Split sp) {
#ifndef SKIM_WGMMA
  __trap();  // launched only where sm_90a code exists (wgmma_available): elsewhere the MMAs are empty
#endif
  using T = TileSm90<D>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t q_s = (smem_addr(smem_raw) + 1023) & ~1023u, kv_s = q_s + T::kQBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;
  const CtaWork w = cta_work<T>(a, sp);
  if (w.idle) return;
  const float scale_log2 = a.scale * 1.4426950408889634f;

  start_loads<T>(a, w, q_s, kv_s);

  float o[1][D / 8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[0][dt][0] = o[0][dt][1] = o[0][dt][2] = o[0][dt][3] = 0.0f;
  for (int step = w.begin; step < w.end; ++step) {
    const uint32_t k_s = next_stage<T, true>(a, w, kv_s, step), v_s = k_s + T::kKVBytes;
    float s[1][16][4];
    scores_sm90<D>(q_s, k_s, wg, reinterpret_cast<float(&)[64]>(s));
    if ((step + 1) * T::kKeys - 1 > w.min_pos) mask_scores<T, 1>(a, w, warp, lane, step * T::kKeys, s);
    uint32_t p[1][16][2];
    update_softmax<D, 1, T::kKeys>(s, scale_log2, m, l, o, p);
    pv_sm90<D>(p, v_s, reinterpret_cast<float(&)[D / 2]>(o));
  }
  store_rows<T, D, 1>(a, w, sp, warp, lane, o, m, l);
}

// The warp-specialised form (FlashAttention-3's division of labour, optionally its ping-pong): a
// producer warpgroup loads Q and each step's K/V pages into three stages, and two consumer
// warpgroups (64 rows each, as above) compute, so loads and barriers leave the consumers'
// critical path and the two consumers drift apart (one's softmax overlaps the other's MMAs).
// Per stage an mbarrier `full` (the producer's 128 threads arrive once the stage's cp.async
// copies are complete and fenced for the async proxy) and `empty` (the consumers' 256 threads
// arrive once their P V has read it). Registers move to the consumers by setmaxnreg.
template <int D>
struct TileSm90Ws : TileSm90<D> {
  using Base = TileSm90<D>;
  static constexpr int kStages = 3;
  static constexpr int kThreads = 128;        // the loaders: the producer warpgroup
  static constexpr int kCtaThreads = 3 * 128;
  static constexpr int kBarrierBytes = 2 * kStages * 8;
  static constexpr int kSmemBytes = Base::kQBytes + kStages * 2 * Base::kKVBytes + 1024 + kBarrierBytes;
};

template <int D>
__device__ __forceinline__ void produce_sm90(const PagedPrefillArgs& a, const CtaWork& w, uint32_t q_s, uint32_t kv_s,
                                             uint32_t full, uint32_t empty) {
  using T = TileSm90Ws<D>;
  int i = 0;
  for (int step = w.begin; step < w.end; ++step, ++i) {
    const int stage = i % T::kStages;
    if (i >= T::kStages) detail::mbar_wait(empty + 8 * stage, (i / T::kStages - 1) & 1);  // its last use is read
    if (i == 0) load_q_tile<T>(a, w, q_s);
    const uint32_t k_s = kv_s + stage * 2 * T::kKVBytes;
    load_kv_step<T>(a, w, step, k_s, k_s + T::kKVBytes);
    cp_async_commit();
    if (i >= 1) {  // the previous step's copies (and the queries) are in: hand that stage over
      cp_async_wait<1>();
      detail::fence_proxy_async();
      detail::mbar_arrive(full + 8 * ((i - 1) % T::kStages));
    }
  }
  if (i >= 1) {
    cp_async_wait<0>();
    detail::fence_proxy_async();
    detail::mbar_arrive(full + 8 * ((i - 1) % T::kStages));
  }
}

// Named barriers 1 and 2 (0 is __syncthreads'): the consumers' turns at the tensor cores.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The consumers' schedules. kInOrder: each step's Q K^T, softmax, then P V. kPingpong:
// FlashAttention-3's inter-warpgroup schedule. A consumer's step issues this step's Q K^T and the
// previous step's P V together, at its turn (named barrier 1 + its warpgroup, handed to the other
// once issued), so that one warpgroup's softmax runs while the other's MMAs do; P V lags a step
// (O is rescaled after it lands), and a stage is released once its P V has read it. (FlashAttention-3's
// intra-warpgroup overlap, this step's softmax beside the previous step's P V in one warpgroup,
// was 14-20% slower than kInOrder on an H200 at 8K-128K and is gone:
// bench/results/2026-11-27-h200-pending/.)
enum class WsSchedule { kInOrder, kPingpong };

template <int D, WsSchedule S>
__global__ void __launch_bounds__(384, 1) flash_prefill_sm90_ws_kernel(PagedPrefillArgs a, Split sp) {
  constexpr bool PINGPONG = S == WsSchedule::kPingpong;
#ifndef SKIM_WGMMA
  __trap();  // launched only where sm_90a code exists (wgmma_available)
#endif
  using T = TileSm90Ws<D>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t q_s = (smem_addr(smem_raw) + 1023) & ~1023u, kv_s = q_s + T::kQBytes;
  const uint32_t full = kv_s + T::kStages * 2 * T::kKVBytes, empty = full + 8 * T::kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const CtaWork w = cta_work<T>(a, sp);
  if (w.idle) return;
  if (threadIdx.x == 0)
    for (int s = 0; s < T::kStages; ++s) {
      detail::mbar_init(full + 8 * s, 128);
      detail::mbar_init(empty + 8 * s, 256);
    }
  __syncthreads();
  if (warp < 4) {
    detail::setmaxnreg_dec<40>();
    produce_sm90<D>(a, w, q_s, kv_s, full, empty);
    return;
  }
  detail::setmaxnreg_inc<232>();
  const int cw = warp - 4, wg = cw / 4;  // the consumer's warp (its 16 rows) and warpgroup (64)
  const float scale_log2 = a.scale * 1.4426950408889634f;
  const auto k_of = [&](int stage) { return kv_s + stage * 2 * T::kKVBytes; };
  float o[1][D / 8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[0][dt][0] = o[0][dt][1] = o[0][dt][2] = o[0][dt][3] = 0.0f;
  float(&of)[D / 2] = reinterpret_cast<float(&)[D / 2]>(o);
  if constexpr (PINGPONG)
    if (wg == 1) named_arrive(1, 256);  // warpgroup 0 takes the first turn
  uint32_t p[1][16][2];
  int i = 0, prev = -1;  // prev: the stage whose P V is pending (PINGPONG)
  for (int step = w.begin; step < w.end; ++step, ++i) {
    const int stage = i % T::kStages;
    detail::mbar_wait(full + 8 * stage, (i / T::kStages) & 1);
    float s[1][16][4];
    float(&sf)[64] = reinterpret_cast<float(&)[64]>(s);
    if constexpr (PINGPONG) {
      named_sync(1 + wg, 256);
      issue_scores_sm90<D>(q_s, k_of(stage), wg, sf);
      if (prev >= 0) issue_pv_sm90<D>(p, k_of(prev) + T::kKVBytes, of);
      named_arrive(1 + (1 - wg), 256);
      finish_mma(sf, of);
      if (prev >= 0) detail::mbar_arrive(empty + 8 * prev);
    } else {
      scores_sm90<D>(q_s, k_of(stage), wg, sf);
    }
    if ((step + 1) * T::kKeys - 1 > w.min_pos) mask_scores<T, 1>(a, w, cw, lane, step * T::kKeys, s);
    update_softmax<D, 1, T::kKeys>(s, scale_log2, m, l, o, p);
    if constexpr (PINGPONG) {
      prev = stage;
    } else {
      pv_sm90<D>(p, k_of(stage) + T::kKVBytes, of);
      detail::mbar_arrive(empty + 8 * stage);  // this thread's reads of the stage are done
    }
  }
  if constexpr (PINGPONG) {
    if (prev >= 0) {
      pv_sm90<D>(p, k_of(prev) + T::kKVBytes, of);
      detail::mbar_arrive(empty + 8 * prev);
    }
    if (wg == 0) named_sync(1, 256);  // warpgroup 1's last hand-over, so no arrival is left pending
  }
  store_rows<T, D, 1>(a, w, sp, cw, lane, o, m, l);
}

}  // namespace skim::cuda::prefill
