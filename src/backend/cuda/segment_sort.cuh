// Sorting lists of (key, value) pairs by descending key, stably (equal keys keep their order,
// as the CPU's std::stable_sort): the page selections' by-score order (quest, gbsa), which ART
// traverses. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace skim::cuda {

// List l's pairs are keys[begin[l], end[l]) and values alike (device); their sorted order goes
// to sorted_keys / sorted_values at the same positions.
struct SegmentSortArgs {
  int lists = 0;
  int total = 0;      // pairs in the arrays (the lists' capacity)
  int max_items = 0;  // host bound of a list's length
  const uint32_t* keys = nullptr;
  uint32_t* sorted_keys = nullptr;
  const int32_t* values = nullptr;
  int32_t* sorted_values = nullptr;
  const int* begin = nullptr;
  const int* end = nullptr;
  void* scratch = nullptr;  // segment_sort_scratch_bytes
  size_t scratch_bytes = 0;
};

// Lists of at most this many pairs sort in one launch, a CTA each in shared memory; longer ones
// go through cub's segmented radix sort, a launch per pass (six for 32-bit keys: at 8B b8 32K
// 54 us a layer against one launch's ~10).
inline constexpr int kBlockSortItems = 8192;

size_t segment_sort_scratch_bytes(int total, int lists, int max_items);
// Asynchronous on `stream`, a programmatic dependent of its previous kernel (pdl.cuh).
cudaError_t segment_sort_desc(const SegmentSortArgs& a, cudaStream_t stream);

}  // namespace skim::cuda
