// The pieces both prefill attention kernels share (paged_prefill_mma.cuh: mma.sync;
// paged_prefill_sm90.cuh: wgmma): the key-range split, what a CTA works on (its KV head, its
// sequence, its packed (token, query head) rows, its key steps), the loads of its queries and of
// a step's K/V pages into shared memory (through the tile's swizzle), the causal mask, the
// online softmax of a step and the stores. A tile type T gives the shape: kRows, kKeys,
// kWarpRows, kThreads, kPieces, kRowBytes and swz(row, piece). Device code, included by
// paged_prefill_attention.cu only.
#pragma once

#include <cuda_bf16.h>

#include "attention/paged_prefill_args.h"
#include "backend/cuda/paged_decode_attention_impl.cuh"  // PTX wrappers
#include "backend/cuda/wgmma.cuh"  // fence_proxy_async

namespace skim::cuda::prefill {

using detail::cp_async16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::pack_bf16;
using detail::smem_addr;

constexpr int kPage = 16;

// Split of the key range: CTA z of a row tile takes key steps [z * steps_per_split, ...).
// With splits > 1 each CTA writes its rows' normalised partial o and lse to part_o
// [n][num_heads][splits][D] and part_lse [n][num_heads][splits] (merge_kernel's layout, the
// rows as its batch); rows whose position precedes the CTA's keys write (0, -inf).
struct Split {
  int splits = 1;
  int steps_per_split = 1 << 24;
  float* part_o = nullptr;
  float* part_lse = nullptr;
};

// What a CTA works on: its KV head, its sequence, its packed rows and the key steps it visits.
struct CtaWork {
  const int32_t* table;  // the sequence's pages
  int h, group;
  int row0;        // the sequence's first row of q, o and positions
  int total_rows;  // its packed rows: rows x group
  int r0;          // the tile's first packed row
  int min_pos;     // position of the tile's first token: steps past it need the causal mask
  int pages;       // pages the tile's last token sees
  int begin, end;
  bool idle = false;  // past the last tile: with several sequences the grid is a bound
  __device__ int token(int r) const { return row0 + r / group; }
  __device__ size_t head_row(const PagedPrefillArgs& a, int r) const {  // row of q / o: (token, query head)
    return size_t(token(r)) * a.num_heads + h * group + r % group;
  }
};

template <class T>
__device__ __forceinline__ CtaWork cta_work(const PagedPrefillArgs& a, const Split& sp) {
  CtaWork w;
  w.h = blockIdx.y;
  w.group = a.num_heads / a.num_kv_heads;
  // The last row tiles have the longest prefixes: they start first, so none runs alone at the end.
  int tile = gridDim.x - 1 - blockIdx.x, seq = 0, row0 = 0, rows = a.n;
  if (a.seq_rows) {  // this tile's sequence (a handful: a scan)
    for (; seq < a.num_seqs; ++seq) {
      row0 = a.seq_rows[seq];
      rows = a.seq_rows[seq + 1] - row0;
      const int tiles = (rows * w.group + T::kRows - 1) / T::kRows;
      if (tile < tiles) break;
      tile -= tiles;
    }
    if (seq == a.num_seqs) {
      w.idle = true;
      return w;
    }
  }
  w.table = a.page_table + (a.seq_rows ? size_t(row0) * a.table_stride : 0);
  w.row0 = row0;
  w.total_rows = rows * w.group;
  w.r0 = tile * T::kRows;
  const int last_row = min(w.total_rows, w.r0 + T::kRows) - 1;
  w.min_pos = a.positions[w.token(w.r0)];  // rows are consecutive positions
  const int last_pos = a.positions[w.token(last_row)];
  w.pages = last_pos / kPage + 1;
  w.begin = blockIdx.z * sp.steps_per_split;
  w.end = min(last_pos / T::kKeys + 1, w.begin + sp.steps_per_split);
  return w;
}

// The tile's queries into shared memory; rows past the chunk are zeros.
template <class T>
__device__ __forceinline__ void load_q_tile(const PagedPrefillArgs& a, const CtaWork& w, uint32_t q_s) {
  for (int i = threadIdx.x; i < T::kRows * T::kPieces; i += T::kThreads) {
    const int row = i / T::kPieces, c = i % T::kPieces, r = w.r0 + row;
    const bool ok = r < w.total_rows;
    const size_t head = ok ? w.head_row(a, r) : 0;
    cp_async16(q_s + T::swz(row, c), a.q + head * T::kRowBytes / 2 + c * 8, ok ? 16 : 0);
  }
}

// K and V of the step's pages into a stage; pages past the tile's prefix are zeros (their
// scores are masked, and zero V keeps 0 x V finite).
template <class T>
__device__ __forceinline__ void load_kv_step(const PagedPrefillArgs& a, const CtaWork& w, int step, uint32_t k_s,
                                             uint32_t v_s) {
  for (int i = threadIdx.x; i < T::kKeys * T::kPieces; i += T::kThreads) {
    const int key = i / T::kPieces, c = i % T::kPieces, page = step * (T::kKeys / kPage) + key / kPage;
    const bool ok = page < w.pages;
    const size_t off =
        ok ? ((size_t(w.table[page]) * a.num_kv_heads + w.h) * kPage + key % kPage) * (T::kRowBytes / 2) + c * 8
           : 0;
    cp_async16(k_s + T::swz(key, c), a.k_pool + off, ok ? 16 : 0);
    cp_async16(v_s + T::swz(key, c), a.v_pool + off, ok ? 16 : 0);
  }
}

// The tile's K/V double buffer at kv_s: step i (counted from the CTA's first) in stage i & 1,
// K then V.
template <class T>
__device__ __forceinline__ uint32_t k_stage(uint32_t kv_s, int i) {
  return kv_s + (i & 1) * 2 * T::kKVBytes;
}

// Before the loop: the queries and the first step's K/V start loading (one commit group).
template <class T>
__device__ __forceinline__ void start_loads(const PagedPrefillArgs& a, const CtaWork& w, uint32_t q_s, uint32_t kv_s) {
  load_q_tile<T>(a, w, q_s);
  if (w.begin < w.end) load_kv_step<T>(a, w, w.begin, k_stage<T>(kv_s, 0), k_stage<T>(kv_s, 0) + T::kKVBytes);
  cp_async_commit();
}

// At the top of step `step`: waits for its stage (and, first time, the queries), lets every
// thread see it (for wgmma, ASYNC_READ: also the async proxy), then starts loading the next step
// into the other stage, which the barrier guarantees no warp still reads. Returns the step's K
// stage (V follows it).
template <class T, bool ASYNC_READ>
__device__ __forceinline__ uint32_t next_stage(const PagedPrefillArgs& a, const CtaWork& w, uint32_t kv_s, int step) {
  cp_async_wait<0>();
  if constexpr (ASYNC_READ) detail::fence_proxy_async();  // cp.async wrote it; wgmma reads it
  __syncthreads();
  if (step + 1 < w.end) {
    const uint32_t k_next = k_stage<T>(kv_s, step + 1 - w.begin);
    load_kv_step<T>(a, w, step + 1, k_next, k_next + T::kKVBytes);
  }
  cp_async_commit();
  return k_stage<T>(kv_s, step - w.begin);
}

// Keys after a row's position score -inf (the causal mask; also the pages past the prefix).
// Only the steps at the tile's diagonal come here: the rows' positions are loaded then, not
// held in registers through the loop.
template <class T, int MT>
__device__ __forceinline__ void mask_scores(const PagedPrefillArgs& a, const CtaWork& w, int warp, int lane, int key0,
                                            float (&s)[MT][T::kKeys / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = w.r0 + warp * T::kWarpRows + mt * 16 + lane / 4 + 8 * half;
      const int pos = r < w.total_rows ? a.positions[w.token(r)] : -1;  // past the chunk: all masked
#pragma unroll
      for (int j = 0; j < T::kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (key0 + 8 * j + 2 * (lane & 3) + e > pos) s[mt][j][2 * half + e] = -INFINITY;
    }
}

// The online softmax of one step, in two halves: next_probabilities takes the new running maxima, the
// factor alpha that rescales the old state and the step's probabilities as bf16 A fragments
// p[mt][j][half] (row lane/4 + 8 half, keys 8j + 2(lane%4), + 1) with their sum; rescale_state
// then rescales o and l and adds the sum. l sums the rounded weights P.V uses (so o stays a
// weighted mean), per lane: the four lanes of a row are added at the end.
template <int MT, int KEYS>
__device__ __forceinline__ void next_probabilities(const float (&s)[MT][KEYS / 8][4], float scale_log2,
                                                   float (&m)[MT][2], float (&alpha)[MT][2], float (&sum)[MT][2],
                                                   uint32_t (&p)[MT][KEYS / 8][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < KEYS / 8; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * half], s[mt][j][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[mt][half], mx * scale_log2);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet stays at 0
      alpha[mt][half] = exp2f(m[mt][half] - base);
      m[mt][half] = m_new;
      float total = 0.0f;
#pragma unroll
      for (int j = 0; j < KEYS / 8; ++j) {
        const uint32_t pk = pack_bf16(exp2f(fmaf(s[mt][j][2 * half], scale_log2, -base)),
                                      exp2f(fmaf(s[mt][j][2 * half + 1], scale_log2, -base)));
        p[mt][j][half] = pk;
        total += __uint_as_float(pk << 16) + __uint_as_float(pk & 0xffff0000u);
      }
      sum[mt][half] = total;
    }
}

template <int D, int MT>
__device__ __forceinline__ void rescale_state(const float (&alpha)[MT][2], const float (&sum)[MT][2],
                                              float (&l)[MT][2], float (&o)[MT][D / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      l[mt][half] = l[mt][half] * alpha[mt][half] + sum[mt][half];
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][2 * half] *= alpha[mt][half], o[mt][dt][2 * half + 1] *= alpha[mt][half];
    }
}

// Both halves at once: the state is rescaled before the step's P V (the in-order schedules).
template <int D, int MT, int KEYS>
__device__ __forceinline__ void update_softmax(float (&s)[MT][KEYS / 8][4], float scale_log2, float (&m)[MT][2],
                                               float (&l)[MT][2], float (&o)[MT][D / 8][4],
                                               uint32_t (&p)[MT][KEYS / 8][2]) {
  float alpha[MT][2], sum[MT][2];
  next_probabilities<MT, KEYS>(s, scale_log2, m, alpha, sum, p);
  rescale_state<D, MT>(alpha, sum, l, o);
}

// The warp's rows' o / l and lse, or this split's partials.
template <class T, int D, int MT>
__device__ __forceinline__ void store_rows(const PagedPrefillArgs& a, const CtaWork& w, const Split& sp, int warp,
                                           int lane, const float (&o)[MT][D / 8][4], const float (&m)[MT][2],
                                           float (&l)[MT][2]) {
  const int ns = sp.splits;
  float* out_o = ns > 1 ? sp.part_o : a.o;
  float* out_lse = ns > 1 ? sp.part_lse : a.lse;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = l[mt][half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = w.r0 + warp * T::kWarpRows + mt * 16 + lane / 4 + 8 * half;
      if (r >= w.total_rows) continue;
      const size_t at = w.head_row(a, r) * ns + blockIdx.z;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      float* dst = out_o + at * D + 2 * (lane & 3);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<float2*>(dst + 8 * dt) = make_float2(o[mt][dt][2 * half] * inv, o[mt][dt][2 * half + 1] * inv);
      if ((lane & 3) == 0) out_lse[at] = sum > 0.0f ? (m[mt][half] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
    }
}

}  // namespace skim::cuda::prefill
