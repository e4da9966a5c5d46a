// Descending stable sorts of (key, value) lists (see segment_sort.cuh).
#include "backend/cuda/segment_sort.cuh"

#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "backend/cuda/pdl.cuh"

namespace skim::cuda {

namespace {

// One CTA per list: its pairs in a blocked arrangement (thread t holds items t ITEMS ..), the
// block's radix sort (stable: the rank of equal keys follows that arrangement, i.e. the list's
// order), written back by rank. Slots past the list hold key 0, which sorts last and, stable,
// after any real 0 key.
template <int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS) block_sort_kernel(const SegmentSortArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  using Sort = cub::BlockRadixSort<uint32_t, THREADS, ITEMS, int32_t>;
  __shared__ typename Sort::TempStorage tmp;
  const int first = a.begin[blockIdx.x], n = a.end[blockIdx.x] - first;
  if (n <= 0) return;  // the CTA's threads alike: no barrier is left waiting
  uint32_t keys[ITEMS];
  int32_t values[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x * ITEMS + j;
    keys[j] = i < n ? a.keys[first + i] : 0u;
    values[j] = i < n ? a.values[first + i] : 0;
  }
  Sort(tmp).SortDescending(keys, values);
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x * ITEMS + j;
    if (i < n) {
      a.sorted_keys[first + i] = keys[j];
      a.sorted_values[first + i] = values[j];
    }
  }
}

cudaError_t radix_sort(const SegmentSortArgs& a, void* scratch, size_t& bytes, cudaStream_t stream) {
  return cub::DeviceSegmentedRadixSort::SortPairsDescending(scratch, bytes, a.keys, a.sorted_keys, a.values,
                                                            a.sorted_values, a.total, a.lists, a.begin, a.end, 0, 32,
                                                            stream);
}

}  // namespace

size_t segment_sort_scratch_bytes(int total, int lists, int max_items) {
  if (max_items <= kBlockSortItems || lists <= 0) return 0;
  SegmentSortArgs a{.lists = lists, .total = total, .max_items = max_items};
  size_t bytes = 0;
  return radix_sort(a, nullptr, bytes, nullptr) == cudaSuccess ? bytes : 0;
}

cudaError_t segment_sort_desc(const SegmentSortArgs& a, cudaStream_t stream) {
  if (a.lists <= 0) return cudaSuccess;
  if (a.max_items <= 2048) return launch_pdl(block_sort_kernel<256, 8>, dim3(a.lists), 256, 0, stream, a);
  if (a.max_items <= kBlockSortItems) return launch_pdl(block_sort_kernel<512, 16>, dim3(a.lists), 512, 0, stream, a);
  size_t bytes = a.scratch_bytes;
  if (a.scratch == nullptr || bytes < segment_sort_scratch_bytes(a.total, a.lists, a.max_items))
    return cudaErrorInvalidValue;
  return radix_sort(a, a.scratch, bytes, stream);
}

}  // namespace skim::cuda
