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

// A list of n <= kSortThreads x E pairs: each item as one 64-bit word, its key above the
// complement of its index (so that a descending sort of the words is the stable descending sort
// of the keys: equal keys by ascending index), padded with zeros (below any item's word) to a power
// of two, `size`, thread t holding items t E .. t E + E - 1, sorted descending by a bitonic
// network: a stage's pairs within a thread swap in registers, within a warp through shuffles,
// across warps through shared memory (a barrier a stage, double-buffered). Warps past `size` only
// keep the barriers (the network's work grows with size log^2 size, so a short list pays for its
// own length: with every thread holding two items, 205-page lists sorted in 11.3 us at 8B b8 32K).
template <int E>
__device__ __forceinline__ void bitonic_sort_list(const SegmentSortArgs& a, int first, int n,
                                                  BitonicStorage& buf) {
  int size = 64;  // at least 32 E (E = 1 below 512 items): whole warps are in or out
  while (size < n) size <<= 1;
  const int t = threadIdx.x;
  const bool in = t * E < size;
  unsigned long long x[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = t * E + e;
    x[e] = i < n ? (static_cast<unsigned long long>(a.keys[first + i]) << 32) | ~static_cast<uint32_t>(i) : 0ull;
  }
  int flip = 0;
  for (int k = 2; k <= size; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      if (j >= 32 * E) {  // the partner in another warp
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
      } else if (!in) {
        continue;
      } else if (j >= E) {  // in another lane of the warp
#pragma unroll
        for (int e = 0; e < E; ++e) x[e] = bitonic_keep(x[e], __shfl_xor_sync(0xffffffffu, x[e], j / E), t * E + e, j, k);
      } else {  // in this thread (j as a constant: x stays in registers)
#pragma unroll
        for (int jj = E / 2; jj > 0; jj >>= 1)
          if (j == jj) {
#pragma unroll
            for (int e = 0; e < E; ++e)
              if ((e & jj) == 0) {
                const unsigned long long lo = x[e], hi = x[e | jj];
                const bool descending = ((t * E + e) & k) == 0;
                x[e] = descending ? (lo > hi ? lo : hi) : (lo < hi ? lo : hi);
                x[e | jj] = descending ? (lo > hi ? hi : lo) : (lo < hi ? hi : lo);
              }
          }
      }
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
