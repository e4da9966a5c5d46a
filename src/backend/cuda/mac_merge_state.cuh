// MAC's merge and push of one (row, query head) (attention/mac_decode_args.h, MacMergePushArgs),
// in the two kernels that run it: mac_merge_push's own (mac_decode.cu, a thread an element) and
// the split decode's chunk merge as its epilogue (paged_decode_attention_impl.cuh,
// MacMergePushEpilogue: a thread four elements), so that a step whose attention call splits its
// lists merges its chunks, merges the parts below and above each prefix end with the reused
// prefix, pushes the ring entries and advances the rings in one launch, where mac_merge_push
// took two launches after the chunk merge. Device code.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "attention/attention_state.h"
#include "attention/mac_decode_args.h"
#include "backend/cuda/mma_sync.cuh"

namespace skim::cuda::detail {

__device__ __forceinline__ const MacRowRule* mac_rule_of(const MacRowRule* rules, const int32_t* row_policy, int b) {
  return rules + (row_policy ? row_policy[b] : 0);
}

// Row b's query head h: its place in the merge's arrays and its ring slot.
struct MacMergeTarget {
  size_t i = 0;  // b * num_heads + h
  int b = 0, h = 0, slot = -1;
  bool push = false;  // an active row with a ring: its new entry is written
};

__device__ __forceinline__ MacMergeTarget mac_merge_target(const MacMergePushArgs& a, int b, int h) {
  MacMergeTarget t;
  t.i = size_t(b) * a.merge.num_heads + h;
  t.b = b;
  t.h = h;
  t.slot = a.row_slot ? a.row_slot[b] : -1;
  t.push = t.slot >= 0 && mac_rule_of(a.rules, a.row_policy, b)->active;
  return t;
}

// The reused prefix at elements e0 .. e0 + N - 1: the hit entry's state, or nothing (a miss).
// The entry was written in an earlier step, so the split decode's merge loads it before it waits
// for the split kernel (MacMergePushEpilogue::prefetch).
template <int N>
struct MacReused {
  float o[N] = {};
  float lse = -INFINITY;
};

template <int N>
__device__ __forceinline__ MacReused<N> mac_load_reused(const MacMergePushArgs& a, const MacMergeTarget& t, int e0) {
  MacReused<N> r;
  const int entry = a.hit_entry ? a.hit_entry[t.i] : -1;
  if (t.slot < 0 || entry < 0) return r;
  const size_t at = (size_t(t.slot) * a.rings.capacity + entry) * a.merge.num_heads + t.h;
#pragma unroll
  for (int k = 0; k < N; ++k) r.o[k] = a.rings.o[at * a.merge.head_dim + e0 + k];
  r.lse = a.rings.lse[at];
  return r;
}

template <int N>
__device__ __forceinline__ void mac_store_bf16(uint16_t* p, const float (&x)[N]) {
  if constexpr (N == 4) {  // four bf16 in one 8-byte store, each rounded to nearest even
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]));
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = __bfloat16_as_ushort(__float2bfloat16(x[k]));
  }
}

// Which view of a slot's fill a push appends after (MacRingsView): the chunk-merge epilogue's
// the step's, mac_merge_push's the latest.
enum class MacFillView { kStep, kLatest };

// Elements e0 .. e0 + N - 1 of the target as MacMergePushArgs says: cache = reused + below,
// out = cache + above (above null: no part above); for an active row with a ring, its new entry
// (the pre-RoPE query, cache and position) after the newest of the fill's `view`, over the
// oldest once the ring holds its window, the row taking the (count + rank)-th place where
// consecutive rows share a slot.
// Every thread of the target calls it (the head's elements split among them); `sync` orders
// their reads of the reused entry (mac_load_reused) before the push may overwrite it. Returns the
// ring entry written (-1: none).
template <int N, class Sync>
__device__ __forceinline__ int mac_merge_push_elements(const MacMergePushArgs& a, const MacMergeTarget& t,
                                                       MacFillView view, int e0, MacReused<N> c,
                                                       const float (&below)[N], float below_lse,
                                                       const float* above, float above_lse, Sync sync) {
  const MacMergeArgs& mg = a.merge;
  const int d = mg.head_dim;
  merge_state(c.o, c.lse, below, below_lse, N);  // the state cached for this row
  if (mg.out || a.out_bf16) {
    float o[N];
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = c.o[k];
    float l = c.lse;
    if (above) merge_state(o, l, above, above_lse, N);
    if (a.out_bf16) {  // the o projection's input, with no conversion pass after
      mac_store_bf16(a.out_bf16 + t.i * d + e0, o);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) mg.out[t.i * d + e0 + k] = o[k];
    }
    if (a.out_lse && e0 == 0) a.out_lse[t.i] = l;
  }
  if (mg.cache_o) {
#pragma unroll
    for (int k = 0; k < N; ++k) mg.cache_o[t.i * d + e0 + k] = c.o[k];
  }
  if (mg.cache_lse && e0 == 0) mg.cache_lse[t.i] = c.lse;
  if (!t.push) return -1;
  sync();  // every thread has read the reused entry before the lead may overwrite its lse
  const MacRingsView& r = a.rings;
  const int32_t* fill = view == MacFillView::kStep ? mac_fill_step(r.fill, t.slot) : mac_fill_latest(r.fill, t.slot);
  const int first = fill[0], count = fill[1];
  const int K = mac_rule_of(a.rules, a.row_policy, t.b)->window;
  int rank = 0;
  while (t.b - rank > 0 && a.row_slot[t.b - rank - 1] == t.slot) ++rank;
  const int e = (first + count + rank) % K;
  const size_t at = (size_t(t.slot) * r.capacity + e) * mg.num_heads + t.h;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    r.q_pre[at * d + e0 + k] = a.q_pre[t.i * d + e0 + k];
    r.o[at * d + e0 + k] = c.o[k];
  }
  if (e0 == 0) r.lse[at] = c.lse;
  if (e0 == 0 && t.h == 0) r.pos[size_t(t.slot) * r.capacity + e] = a.positions[t.b];
  return e;
}

// The split decode's chunk merge ending in MAC's merge and push (paged_decode_attention's MAC
// form): the call attends 2n rows, [0, n) the parts below the rows' prefix ends and [n, 2n) the
// parts above (PagedDecodeArgs::q_rows = n). The merge's block of (row, head) merges both parts'
// chunks (kParts = 2: states s and n H + s), then its D / 4 threads, four elements each and lanes
// of its first warp, merge them with the reused prefix and push the ring entry after the fill's
// step view, which the step's match wrote and no block of this kernel writes; head 0 of a run's
// last row advances the latest view from it (MacRingsView), so no block waits for another. prefetch,
// before the merge waits for the split kernel, reads the row's hit entry: the match wrote it
// before the split's predecessor (the page plan) ran, the ring in earlier steps.
struct MacMergePushEpilogue {
  static constexpr int kParts = 2;  // below and above the prefix end
  MacMergePushArgs a;

  struct Prefetched {
    MacMergeTarget target;
    MacReused<4> reused;
  };
  __device__ __forceinline__ bool live(int) const { return true; }
  __device__ __forceinline__ Prefetched prefetch(int s, int v) const {
    const int H = a.merge.num_heads;
    Prefetched p;
    p.target = mac_merge_target(a, s / H, s % H);
    p.reused = mac_load_reused<4>(a, p.target, 4 * v);
    return p;
  }
  __device__ __forceinline__ void operator()(const Prefetched& p, int, int v, const float4 (&o)[2],
                                             const float (&lse)[2]) const {
    const MacMergeTarget& t = p.target;
    const int n = a.merge.batch, d = a.merge.head_dim;
    const unsigned lanes = d >= 128 ? 0xffffffffu : (1u << (d / 4)) - 1;
    const float below[4] = {o[0].x, o[0].y, o[0].z, o[0].w}, above[4] = {o[1].x, o[1].y, o[1].z, o[1].w};
    const int e = mac_merge_push_elements(a, t, MacFillView::kStep, 4 * v, p.reused, below, lse[0], above, lse[1],
                                          [lanes] { __syncwarp(lanes); });
    if (e < 0 || v != 0 || t.h != 0 || (t.b + 1 < n && a.row_slot[t.b + 1] == t.slot)) return;
    int rows = 1;  // the run of rows of this slot ending at t.b
    while (t.b - rows >= 0 && a.row_slot[t.b - rows] == t.slot) ++rows;
    mac_fill_advance(mac_fill_step(a.rings.fill, t.slot), rows, mac_rule_of(a.rules, a.row_policy, t.b)->window,
                     mac_fill_latest(a.rings.fill, t.slot));
  }
};

}  // namespace skim::cuda::detail
