// Descending stable sorts of lists with their payloads (see segment_sort.cuh).
#include "backend/cuda/segment_sort.cuh"

#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/workspace_carver.h"

namespace skim::cuda {

namespace {

constexpr int kSortThreads = 512;

template <int ITEMS>
using BlockSort = cub::BlockRadixSort<uint32_t, kSortThreads, ITEMS, int32_t>;

// Lists of up to this many pairs sort by a bitonic network in registers, sized by the list;
// longer ones (up to kBlockSortItems) by cub's block radix sort, whose eight passes cost about
// 10 us whatever the length. 64 lists of 205 / 650 pages at 8B b8 32K (H100, 2026-11-28): this
// network 7.6 / 12.3 us, cub's block sort sized by the list 9.9 / 10.7, a bitonic network in
// shared memory (a barrier a stage) 9.2 / 14.7.
constexpr int kBitonicItems = 4 * kSortThreads;

// The block sorts' shared memory: one of them runs per CTA (the bitonic network's two buffers for
// the stages whose pairs lie in different warps).
union BlockSortStorage {
  unsigned long long bitonic[2][kBitonicItems];
  typename BlockSort<16>::TempStorage radix;
};

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
                                                  unsigned long long (&buf)[2][kBitonicItems]) {
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

// A list of n <= kBlockSortItems pairs by cub's block radix sort: its keys with their indices in
// a blocked arrangement (thread t holds items t ITEMS ..; stable: equal keys keep that order, the
// list's). Slots past the list hold key 0, which sorts last and, stable, after any real 0 key.
template <int ITEMS, class Storage>
__device__ __forceinline__ void radix_sort_list(const SegmentSortArgs& a, int first, int n, Storage& tmp) {
  uint32_t keys[ITEMS];
  int32_t from[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x * ITEMS + j;
    keys[j] = i < n ? a.keys[first + i] : 0u;
    from[j] = i;
  }
  BlockSort<ITEMS>(tmp).SortDescending(keys, from);
  permute_payloads<ITEMS>(a, first, n, [&](int j) { return from[j]; },
                          [&](int j) { return int(threadIdx.x) * ITEMS + j; });
}

// One CTA per list.
__global__ void __launch_bounds__(kSortThreads) block_sort_kernel(const SegmentSortArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  __shared__ BlockSortStorage tmp;
  const int first = a.begin[blockIdx.x], n = a.end[blockIdx.x] - first;
  if (n <= 0) return;  // the CTA's threads alike: no barrier is left waiting
  if (n <= kSortThreads) return bitonic_sort_list<1>(a, first, n, tmp.bitonic);
  if (n <= 2 * kSortThreads) return bitonic_sort_list<2>(a, first, n, tmp.bitonic);
  if (n <= kBitonicItems) return bitonic_sort_list<4>(a, first, n, tmp.bitonic);
  radix_sort_list<16>(a, first, n, tmp.radix);
}
static_assert(16 * kSortThreads == kBlockSortItems, "the block sort's largest list");

// Lists longer than kBlockSortItems: cub's segmented radix sort of (key, slot) pairs, with the
// payloads copied aside first and gathered back through the sorted slots.
struct RadixScratch {
  uint32_t* sorted_keys = nullptr;
  int32_t *slots = nullptr, *sorted_slots = nullptr, *values = nullptr;
  uint32_t* values2 = nullptr;
  void* cub = nullptr;
  size_t cub_bytes = 0, bytes = 0;
};

cudaError_t radix_sort(const SegmentSortArgs& a, const RadixScratch& s, size_t& bytes, cudaStream_t stream) {
  return cub::DeviceSegmentedRadixSort::SortPairsDescending(s.cub, bytes, a.keys, s.sorted_keys, s.slots,
                                                            s.sorted_slots, a.total, a.lists, a.begin, a.end, 0, 32,
                                                            stream);
}

RadixScratch radix_scratch(const SegmentSortArgs& a, void* base) {
  WorkspaceCarver carve(static_cast<char*>(base));
  RadixScratch s;
  s.sorted_keys = carve.take<uint32_t>(size_t(a.total));
  s.slots = carve.take<int32_t>(size_t(a.total));
  s.sorted_slots = carve.take<int32_t>(size_t(a.total));
  s.values = carve.take<int32_t>(size_t(a.total));
  s.values2 = carve.take<uint32_t>(size_t(a.total));
  size_t cub_bytes = 0;
  if (radix_sort(a, RadixScratch{}, cub_bytes, nullptr) != cudaSuccess) return RadixScratch{};
  s.cub = carve.take<char>(cub_bytes);
  s.cub_bytes = cub_bytes;
  s.bytes = carve.bytes();
  return s;
}

// Per list: each slot's own index (the sort's values) and the payloads set aside.
__global__ void copy_aside_kernel(const SegmentSortArgs a, const RadixScratch s) {
  detail::pdl_enter();  // launched by launch_pdl
  for (int i = a.begin[blockIdx.x] + int(threadIdx.x); i < a.end[blockIdx.x]; i += int(blockDim.x)) {
    s.slots[i] = i;
    s.values[i] = a.values[i];
    if (a.values2) s.values2[i] = a.values2[i];
  }
}

// Per list: the payloads back in sorted order.
__global__ void gather_kernel(const SegmentSortArgs a, const RadixScratch s) {
  detail::pdl_enter();  // launched by launch_pdl
  for (int i = a.begin[blockIdx.x] + int(threadIdx.x); i < a.end[blockIdx.x]; i += int(blockDim.x)) {
    const int from = s.sorted_slots[i];
    a.values[i] = s.values[from];
    if (a.values2) a.values2[i] = s.values2[from];
  }
}

}  // namespace

size_t segment_sort_scratch_bytes(int total, int lists, int max_items) {
  if (max_items <= kBlockSortItems || lists <= 0) return 0;
  return radix_scratch({.lists = lists, .total = total, .max_items = max_items}, nullptr).bytes;
}

cudaError_t segment_sort_desc(const SegmentSortArgs& a, cudaStream_t stream) {
  if (a.lists <= 0) return cudaSuccess;
  if (a.max_items <= kBlockSortItems) return launch_pdl(block_sort_kernel, dim3(a.lists), kSortThreads, 0, stream, a);
  if (a.scratch == nullptr || a.scratch_bytes < segment_sort_scratch_bytes(a.total, a.lists, a.max_items))
    return cudaErrorInvalidValue;
  const RadixScratch s = radix_scratch(a, a.scratch);
  cudaError_t e = launch_pdl(copy_aside_kernel, dim3(a.lists), 256, 0, stream, a, s);
  if (e != cudaSuccess) return e;
  size_t bytes = s.cub_bytes;
  if ((e = radix_sort(a, s, bytes, stream)) != cudaSuccess) return e;
  return launch_pdl(gather_kernel, dim3(a.lists), 256, 0, stream, a, s);
}

}  // namespace skim::cuda
