// Retro's merge of one (row, query head) state (attention/retro_decode_args.h, RetroMergeArgs),
// in the two kernels that run it: retro_merge's own (retro_decode.cu, a thread an element) and
// the split decode's chunk merge as its epilogue (paged_decode_attention_impl.cuh,
// RetroMergeEpilogue: a thread four elements), so a step with split lists merges its chunks and
// its Retro states in one launch. Device code.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "attention/attention_state.h"
#include "attention/retro_decode_args.h"

namespace skim::cuda::detail {

// Where row b's query head h goes: its output, and its sequence's cache entry for its step.
struct RetroMergeTarget {
  size_t out = 0;    // b * num_heads + h: out, out_lse
  size_t entry = 0;  // the cache entry (valid when cached)
  size_t at = 0;     // entry * num_heads + h: cache.o (times head_dim), cache.lse
  int step = 0;
  bool cached = false;  // a Retro row: it reads (past) or writes (newest) an entry
  bool past = false;
  bool tag = false;  // writes the entry's step tag (head 0 of a newest row)
};

__device__ __forceinline__ RetroMergeTarget retro_merge_target(const RetroMergeArgs& a, int b, int h) {
  const int slot = a.row_slot ? a.row_slot[b] : -1;
  RetroMergeTarget t;
  t.out = size_t(b) * a.num_heads + h;
  t.past = slot >= 0 && a.newest_row[b] != b;
  const int w1 = slot < 0 ? 0 : a.entries_of(b);
  t.step = a.retro_step ? a.retro_step[b] : 0;
  t.cached = slot >= 0 && w1 > 0;
  t.entry = t.cached ? size_t(slot) * a.cache.entries + size_t(t.step % w1) : 0;
  t.at = t.entry * a.num_heads + h;
  t.tag = t.cached && !t.past && h == 0;
  return t;
}

__device__ __forceinline__ void retro_write_out(const RetroMergeArgs& a, size_t at, float x) {
  if (a.out_bf16)
    a.out_bf16[at] = __bfloat16_as_ushort(__float2bfloat16(x));
  else
    a.out[at] = x;
}

// A past row's cache entry at elements e0 .. e0 + N - 1: its tag, state and lse, loaded together
// (one round trip). The entry was written in an earlier step, so the split decode's merge loads
// it before it waits for the split kernel (RetroMergeEpilogue::prefetch).
template <int N>
struct RetroCached {
  int tag = -1;
  float o[N] = {};
  float lse = -INFINITY;
};

template <int N>
__device__ __forceinline__ RetroCached<N> retro_load_cached(const RetroMergeArgs& a, const RetroMergeTarget& t, int e0) {
  RetroCached<N> c;
  if (!t.past) return c;
  c.tag = a.cache.step[t.entry];
#pragma unroll
  for (int i = 0; i < N; ++i) c.o[i] = a.cache.o[t.at * a.head_dim + e0 + i];
  c.lse = a.cache.lse[t.at];
  return c;
}

// Elements e0 .. e0 + N - 1 of the target's state (o, and its lse in every thread) merged as
// RetroMergeArgs says: a newest row's (or another policy's) state is its output and goes into its
// cache entry; a past row's merges with its cached state (`cached`, retro_load_cached; nothing
// cached when the entry's tag is not its step), and the result is its output and replaces the
// cached one. Every thread of the head calls it (the head's elements split among them); `sync`
// orders their reads of the cached lse before the lead thread's (e0 == 0) write of it.
template <int N, class Sync>
__device__ __forceinline__ void retro_merge_elements(const RetroMergeArgs& a, const RetroMergeTarget& t, int e0,
                                                     const float (&o)[N], float lse, const RetroCached<N>& cached,
                                                     Sync sync) {
  const int d = a.head_dim;
  const bool lead = e0 == 0;
  if (!t.past) {
#pragma unroll
    for (int i = 0; i < N; ++i) retro_write_out(a, t.out * d + e0 + i, o[i]);
    if (lead && a.out_lse) a.out_lse[t.out] = lse;
    if (!t.cached) return;
#pragma unroll
    for (int i = 0; i < N; ++i) a.cache.o[t.at * d + e0 + i] = o[i];
    if (lead) a.cache.lse[t.at] = lse;
    if (t.tag) a.cache.step[t.entry] = t.step;
    return;
  }
  const bool hit = cached.tag == t.step;
  float m_lse = hit ? cached.lse : -INFINITY;
  float c[N];
#pragma unroll
  for (int i = 0; i < N; ++i) c[i] = hit ? cached.o[i] : 0.0f;
  merge_state(c, m_lse, o, lse, N);
#pragma unroll
  for (int i = 0; i < N; ++i) retro_write_out(a, t.out * d + e0 + i, c[i]);
  if (lead && a.out_lse) a.out_lse[t.out] = m_lse;
  sync();  // every thread has read the cached lse (retro_load_cached) before the lead writes it
#pragma unroll
  for (int i = 0; i < N; ++i) a.cache.o[t.at * d + e0 + i] = c[i];
  if (lead) a.cache.lse[t.at] = m_lse;  // its step's tag stays (no other head may see it change)
}

// The split decode's chunk merge ending in Retro's merge (paged_decode_attention's Retro form):
// the merge kernel's D / 4 threads of state s, four elements each, are lanes of its first warp.
// live and prefetch, before the merge waits for the split kernel, read the rows' inputs and the
// past rows' cache entries (both written before this step's plan), so that the merged state's
// epilogue waits on no load; a folded step's dead states (RetroMergeArgs::row_of_state) are not
// merged.
struct RetroMergeEpilogue {
  RetroMergeArgs a;

  struct Prefetched {
    RetroMergeTarget target;
    RetroCached<4> cached;
  };
  __device__ __forceinline__ bool live(int s) const {
    int b = 0, h = 0;
    return a.row_of_state(size_t(s), b, h);
  }
  __device__ __forceinline__ Prefetched prefetch(int s, int v) const {
    Prefetched p;
    int b = 0, h = 0;
    a.row_of_state(size_t(s), b, h);  // live: a row's state
    p.target = retro_merge_target(a, b, h);
    p.cached = retro_load_cached<4>(a, p.target, 4 * v);
    return p;
  }
  __device__ __forceinline__ void operator()(const Prefetched& p, int, int v, float4 o, float lse) const {
    const float x[4] = {o.x, o.y, o.z, o.w};
    const unsigned lanes = a.head_dim >= 128 ? 0xffffffffu : (1u << (a.head_dim / 4)) - 1;
    retro_merge_elements(a, p.target, 4 * v, x, lse, p.cached, [lanes] { __syncwarp(lanes); });
  }
};

}  // namespace skim::cuda::detail
