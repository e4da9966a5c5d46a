// Descending stable sorts of lists with their payloads (see segment_sort.cuh).
#include "backend/cuda/segment_sort.cuh"

#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/segment_sort_block.cuh"
#include "backend/cuda/workspace_carver.h"

namespace skim::cuda {

namespace {

using namespace segment_sort;

template <int ITEMS>
using BlockSort = cub::BlockRadixSort<uint32_t, kSortThreads, ITEMS, int32_t>;

// The block sorts' shared memory: one of them runs per CTA (the bitonic network's two buffers for
// the stages whose pairs lie in different warps).
union BlockSortStorage {
  BitonicStorage bitonic;
  typename BlockSort<16>::TempStorage radix;
};

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
  if (n <= kCtaSortItems) return sort_list_in_cta(a, first, n, tmp.bitonic);
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
