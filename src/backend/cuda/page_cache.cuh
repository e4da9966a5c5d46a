// KV beyond GPU memory on the device (issue 18; kv/page_cache_args.h): the page cache map, the
// device form of skim::cpu::page_cache_map with the same arguments (device pointers), and the
// gather of the missed pages from the pinned host pool into their slots. Both run inside a
// decode step's graph: no host round trip, nothing allocated. This header holds no device code.
//
// The map is one CTA: the step's distinct pages (marks over the host pool, compacted in
// ascending id), the refusal when they exceed the slots (counts[2] = 1, nothing changed), the
// written pages dropped, hits stamped, and the least recently used unstamped slots (ties to the
// lower slot: page selection's radix select over "steps since last use") taken by the misses in
// ascending page id, in ascending slot order; then the lists as slots. Page ids must lie in
// [0, num_host_pages) (the CPU reference throws; the kernel does not check).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kv/page_cache_args.h"

namespace skim::cuda {

// Scratch of the map: zero-filled once (cudaMemset) when allocated; every call leaves it zero.
struct PageCacheWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};
size_t page_cache_workspace_size(int num_host_pages, int slots);

cudaError_t page_cache_map(const PageCacheArgs& args, const PageCacheWorkspace& workspace, cudaStream_t stream);

// The start of a decode step over host KV: advances the step counter (PageCacheArgs::
// step_counter) and writes each of the n rows' written page, the page holding its position
// (page_table [n][max_pages_per_seq]): the step writes that row's K/V there.
cudaError_t page_cache_begin_step(int64_t* counter, const int32_t* positions, const int32_t* page_table, int n,
                                  int max_pages_per_seq, int page_size, int32_t* written, cudaStream_t stream);

// Copies page copy_page[i] of each host pool (pinned and mapped: its pointer usable on the
// device) into slot copy_slot[i] of the matching device pool, for i < counts[0]; a page is
// page_elems bf16 elements (num_kv_heads x page_size x head_dim), host pages host_page_stride
// elements apart (0: page_elems; a cache per KV head copies one head's piece of each page:
// page_elems = page_size x head_dim, the stride num_kv_heads times that, host_k offset to the
// head). `max_copies` bounds counts[0] (the slots). pools: k and v.
cudaError_t page_cache_gather(const int32_t* copy_page, const int32_t* copy_slot, const int32_t* counts, int max_copies,
                              const uint16_t* host_k, const uint16_t* host_v, uint16_t* slot_k, uint16_t* slot_v,
                              size_t page_elems, size_t host_page_stride, cudaStream_t stream);

}  // namespace skim::cuda
