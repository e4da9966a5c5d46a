// The by-score sort of one list inside a CTA of kSortThreads threads, as device code: the
// segment sort's block kernel (segment_sort.cu) and the page selections whose CTA already holds
// the list it sorts (group_page_select.cu, quest_page_select.cu: no launch of its own) share it.
#pragma once

#include <cstdint>

#include "backend/cuda/segment_sort.cuh"

namespace skim::cuda::segment_sort {

inline constexpr int kSortThreads = 512;
static_assert(kCtaSortItems == 4 * kSortThreads, "four items a thread at most");

// The bitonic network's two buffers for the stages whose pairs lie in different warps.
using BitonicStorage = unsigned long long[2][kCtaSortItems];

// The payloads permuted in place: this thread's items j = 0 .. ITEMS - 1 have rank rank(j) and
// came from from(j) (both relative to `first`); each payload is read at from(j) and, after a
// barrier (every read before any write), written at rank(j).
template <int ITEMS, class From, class Rank>
__device__ __forceinline__ void permute_payloads(const SegmentSortArgs& a, int first, int n, From from, Rank rank) {
  int32_t v[ITEMS];
  uint32_t v2[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const bool in = rank(j) < n;
    v[j] = in ? a.values[first + from(j)] : 0;
    v2[j] = in && a.values2 ? a.values2[first + from(j)] : 0u;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    if (rank(j) < n) {
      a.values[first + rank(j)] = v[j];
      if (a.values2) a.values2[first + rank(j)] = v2[j];
    }
  }
}

// One compare-exchange of a bitonic stage (pairs i, i ^ j in blocks of k), from element i's
// side: the pair's lower element takes the larger word in a block that goes descending
// ((i & k) == 0), the smaller in one that goes ascending.
__device__ __forceinline__ unsigned long long bitonic_keep(unsigned long long x, unsigned long long y, int i, int j,
                                                         int k) {
  const bool lower = (i & j) == 0, descending = (i & k) == 0;
  return lower == descending ? (x > y ? x : y) : (x < y ? x : y);
}

// One stage of the network whose pairs lie inside a warp (J < 32 E, a constant: x stays in
// registers): within a thread (J < E) they swap in registers, across lanes through shuffles.
template <int E, int J>
__device__ __forceinline__ void bitonic_warp_stage(unsigned long long (&x)[E], int t, int k) {
  if constexpr (J >= E) {
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = bitonic_keep(x[e], __shfl_xor_sync(0xffffffffu, x[e], J / E), t * E + e, J, k);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e)
      if ((e & J) == 0) {
        const unsigned long long lo = x[e], hi = x[e | J];
        const bool descending = ((t * E + e) & k) == 0;
        x[e] = descending ? (lo > hi ? lo : hi) : (lo < hi ? lo : hi);
        x[e | J] = descending ? (lo > hi ? hi : lo) : (lo < hi ? hi : lo);
      }
  }
}

// The stages j = 2^(LJ-1) .. 1 of block size k, all inside a warp, unrolled.
template <int E, int LJ>
__device__ __forceinline__ void bitonic_warp_stages(unsigned long long (&x)[E], int t, int k) {
  if constexpr (LJ > 0) {
    bitonic_warp_stage<E, (1 << (LJ - 1))>(x, t, k);
    bitonic_warp_stages<E, LJ - 1>(x, t, k);
  }
}

// Blocks k = 2 .. 2^LK: the network's first stages, every pair inside a warp (2^LK <= 32 E).
template <int E, int LK>
__device__ __forceinline__ void bitonic_warp_blocks(unsigned long long (&x)[E], int t) {
  if constexpr (LK > 1) bitonic_warp_blocks<E, LK - 1>(x, t);
  bitonic_warp_stages<E, LK>(x, t, 1 << LK);
}

// A list of n <= kSortThreads x E pairs: each item as one 64-bit word, its key above the
// complement of its index (so that a descending sort of the words is the stable descending sort
// of the keys: equal keys by ascending index), padded with zeros (below any item's word) to a power
// of two, `size`, thread t holding items t E .. t E + E - 1, sorted descending by a bitonic
// network: a stage's pairs within a thread swap in registers, within a warp through shuffles,
// across warps through shared memory (a barrier a stage, double-buffered). Warps past `size` only
// keep the barriers (the network's work grows with size log^2 size, so a short list pays for its
// own length). The stages inside a warp are unrolled (those of blocks up to a warp's 32 E items
// once, the last log2(32 E) of each larger block in its turn of the loop over blocks): as a loop
// over runtime stages each was a chain of branches around its shuffle, and the sort of gbsa's
// 205-page lists (size 256) took a third of its select kernel; unrolled whole (a copy of the
// network per size) it stalled on instruction fetch instead (ncu, H200 2026-11-28).
template <int E>
__device__ __forceinline__ void bitonic_sort_list(const SegmentSortArgs& a, int first, int n,
                                                  BitonicStorage& buf) {
  constexpr int kWarpItems = 32 * E, kLogWarpItems = E == 1 ? 5 : E == 2 ? 6 : 7;
  static_assert(1 << kLogWarpItems == kWarpItems, "E is 1, 2 or 4");
  int size = 2 * kWarpItems;  // whole warps are in or out
  while (size < n) size <<= 1;
  const int t = threadIdx.x;
  const bool in = t * E < size;
  unsigned long long x[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = t * E + e;
    x[e] = i < n ? (static_cast<unsigned long long>(a.keys[first + i]) << 32) | ~static_cast<uint32_t>(i) : 0ull;
  }
  if (in) bitonic_warp_blocks<E, kLogWarpItems>(x, t);
  int flip = 0;
  for (int k = 2 * kWarpItems; k <= size; k <<= 1) {
    for (int j = k >> 1; j >= kWarpItems; j >>= 1) {  // the partner in another warp
      unsigned long long* w = buf[flip];
      flip ^= 1;
      if (in) {
#pragma unroll
        for (int e = 0; e < E; ++e) w[t * E + e] = x[e];
      }
      __syncthreads();
      if (in) {
#pragma unroll
        for (int e = 0; e < E; ++e) x[e] = bitonic_keep(x[e], w[(t * E + e) ^ j], t * E + e, j, k);
      }
    }
    if (in) bitonic_warp_stages<E, kLogWarpItems>(x, t, k);
  }
  permute_payloads<E>(
      a, first, n, [&](int e) { return int(~static_cast<uint32_t>(x[e])); }, [&](int e) { return t * E + e; });
}

// The list [first, first + n) of a's arrays, n <= kCtaSortItems, sorted by the CTA (every
// thread of the kSortThreads calls it; a barrier first makes the list's writes by any of them
// visible): items a thread as the list needs.
__device__ __forceinline__ void sort_list_in_cta(const SegmentSortArgs& a, int first, int n, BitonicStorage& buf) {
  __syncthreads();
  if (n <= 0) return;  // the CTA's threads alike
  if (n <= kSortThreads) return bitonic_sort_list<1>(a, first, n, buf);
  if (n <= 2 * kSortThreads) return bitonic_sort_list<2>(a, first, n, buf);
  bitonic_sort_list<4>(a, first, n, buf);
}

}  // namespace skim::cuda::segment_sort
