// Sorting lists by descending key, stably (equal keys keep their order, as the CPU's
// std::stable_sort), permuting their payloads in place: the page selections' by-score order
// (quest, gbsa), which ART traverses. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace skim::cuda {

// List l is the slots [begin[l], end[l]) of keys and of the payload arrays (device): the
// payloads at those slots are rewritten in the order of descending key; the keys stay as they
// are.
struct SegmentSortArgs {
  int lists = 0;
  int total = 0;      // slots in the arrays
  int max_items = 0;  // host bound of a list's length
  const uint32_t* keys = nullptr;
  int32_t* values = nullptr;     // a page id per slot
  uint32_t* values2 = nullptr;   // optional: a second payload (the page's head mask)
  const int* begin = nullptr;
  const int* end = nullptr;
  void* scratch = nullptr;  // segment_sort_scratch_bytes
  size_t scratch_bytes = 0;
};

// Lists of at most this many pairs sort in one launch, a CTA each in shared memory, with as
// many items a thread as the list needs (a list of 650 pages took 19 us at the 8192-item size
// at 8B b8 32K, H100 2026-11-28); longer ones go through cub's segmented radix sort, a launch
// per pass (six for 32-bit keys: at 8B b8 32K 54 us a layer against one launch's ~10).
inline constexpr int kBlockSortItems = 8192;

// Lists of up to this many pairs sort by a bitonic network in registers sized by the list
// (segment_sort_block.cuh), which a kernel whose CTA of 512 threads holds the list runs itself
// (the page selections' by_score lists); longer ones by cub's block radix sort, whose eight
// passes cost about 10 us whatever the length. 64 lists of 205 / 650 pages at 8B b8 32K (H100,
// 2026-11-28): the network 7.6 / 12.3 us as a kernel of its own, cub's block sort sized by the
// list 9.9 / 10.7, a bitonic network in shared memory (a barrier a stage) 9.2 / 14.7.
inline constexpr int kCtaSortItems = 2048;

size_t segment_sort_scratch_bytes(int total, int lists, int max_items);
// Asynchronous on `stream`, a programmatic dependent of its previous kernel (pdl.cuh).
cudaError_t segment_sort_desc(const SegmentSortArgs& a, cudaStream_t stream);

}  // namespace skim::cuda
