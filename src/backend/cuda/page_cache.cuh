// KV beyond GPU memory on the device (issue 18; kv/page_cache_args.h): the page cache map, the
// device form of skim::cpu::page_cache_map with the same arguments (device pointers), and the
// gather of the missed pages from the pinned host pool into their slots. Both run inside a
// decode step's graph: no host round trip, nothing allocated. This header holds no device code.
//
// A map is one CTA: the step's distinct pages (marks over the host pool, compacted in
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

// Several independent caches in one launch, a CTA each (HostKVSlots maps a layer's KV heads at
// once: one launch instead of one per head, the heads' maps side by side). Cache c reads and
// writes the arrays of the PageCacheArgs offset by c times: `table`, `slot_table` and `lens`
// elements for its plan (a per-(row, KV head) plan: max_pages, max_pages, 1); num_host_pages
// (slot_of_page), slots (page_in_slot, last_used, copy_page, copy_slot) and 3 (counts) for its
// state and outputs; page_cache_workspace_size(num_host_pages, slots) bytes of workspace.
// step_counter, written, refused_flag and totals are shared.
struct PageCacheBatch {
  int caches = 1;
  size_t table = 0, slot_table = 0, lens = 0;
};

// Bytes of workspace for `caches` caches (each's part aligned, so cache c's starts at c times
// the size of one).
size_t page_cache_workspace_size(int num_host_pages, int slots, int caches = 1);

cudaError_t page_cache_map(const PageCacheArgs& args, const PageCacheWorkspace& workspace, cudaStream_t stream,
                           const PageCacheBatch& batch = {});

// The start of a decode step over host KV: advances the step counter (PageCacheArgs::
// step_counter) and writes each of the n rows' written page, the page holding its position
// (page_table [n][max_pages_per_seq]): the step writes that row's K/V there.
cudaError_t page_cache_begin_step(int64_t* counter, const int32_t* positions, const int32_t* page_table, int n,
                                  int max_pages_per_seq, int page_size, int32_t* written, cudaStream_t stream);

// The copies of a map (or of `caches` maps, cache c's at copy_page/copy_slot + c x max_copies and
// counts + 3c): page copy_page[i] of each host pool (pinned and mapped: its pointer usable on the
// device) into slot copy_slot[i] of the matching device pool, for i < counts[0]. A page is
// page_elems bf16 elements (num_kv_heads x page_size x head_dim), host pages host_page_stride
// elements apart (0: page_elems). A cache per KV head copies one head's piece of each page:
// page_elems = page_size x head_dim, the stride num_kv_heads times that, cache c's host pools at
// host_k/host_v + c x host_cache_stride (the head's offset in a page) and its slots at
// slot_k/slot_v + c x slot_cache_stride. `max_copies` bounds counts[0] (the slots).
// `ctas_per_cache` (0: enough to fill the GPU) caps the CTAs each cache's copies take. The PCIe
// link is saturated by far fewer CTAs than fill the SMs (bench/host_gather_bw.cu: from 4 a cache
// of 8, 50.6 GB/s against the copy engines' 55 on an H100), so a gather overlapping the step's
// compute (the host KV prefetch) takes few, leaving the SMs to the kernels it overlaps.
struct PageGatherArgs {
  const int32_t* copy_page = nullptr;
  const int32_t* copy_slot = nullptr;
  const int32_t* counts = nullptr;
  int max_copies = 0;
  const uint16_t* host_k = nullptr;
  const uint16_t* host_v = nullptr;
  uint16_t* slot_k = nullptr;
  uint16_t* slot_v = nullptr;
  size_t page_elems = 0, host_page_stride = 0;
  int caches = 1;
  size_t host_cache_stride = 0, slot_cache_stride = 0;
  int ctas_per_cache = 0;
};
cudaError_t page_cache_gather(const PageGatherArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
