// The page cache map and gather of KV beyond GPU memory (see page_cache.cuh).
#include "backend/cuda/page_cache.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>

#include "backend/cuda/page_select_common.cuh"
#include "backend/cuda/workspace_carver.h"

namespace skim::cuda {

namespace {

using page_select::kThreads;
using page_select::SelectScratch;

// Workspace: a mark per host page, then the step's distinct pages, its misses and its victim
// slots (at most `slots` each).
struct Scratch {
  uint8_t* mark;
  int32_t *pages, *misses, *victims;
};
Scratch carve(void* base, int num_host_pages, int slots, size_t* bytes) {
  WorkspaceCarver c(static_cast<char*>(base));
  Scratch s;
  s.mark = c.take<uint8_t>(size_t(num_host_pages));
  s.pages = c.take<int32_t>(size_t(slots));
  s.misses = c.take<int32_t>(size_t(slots));
  s.victims = c.take<int32_t>(size_t(slots));
  if (bytes) *bytes = c.bytes();
  return s;
}

// The distinct marked pages in ascending id into x.pages (at most `slots`; the count beyond is
// still counted), the marks cleared. Returns the count to every thread.
__device__ int compact_marks(const PageCacheArgs& a, const Scratch& x, SelectScratch& sm) {
  using Scan = SelectScratch::Scan;
  constexpr int kItems = 16;  // consecutive pages per thread: thread order is id order
  int written = 0;
  for (int base = 0; base < a.num_host_pages; base += kThreads * kItems) {
    const int p0 = base + int(threadIdx.x) * kItems;
    unsigned bits = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (p0 + i < a.num_host_pages && x.mark[p0 + i]) bits |= 1u << i, x.mark[p0 + i] = 0;
    int pos, total;
    Scan(sm.scan).ExclusiveSum(__popc(bits), pos, total);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (bits >> i & 1u) {
        if (written + pos < a.slots) x.pages[written + pos] = p0 + i;
        ++pos;
      }
    written += total;
  }
  return written;
}

__global__ void __launch_bounds__(kThreads) map_kernel(const PageCacheArgs a, const Scratch x) {
  __shared__ SelectScratch sm;
  __shared__ int n_hits, n_misses;
  using Scan = SelectScratch::Scan;
  const int t = threadIdx.x;
  const int64_t step = a.step_counter ? *a.step_counter : a.step;
  // The step's distinct pages.
  for (int i = t; i < a.lists * a.max_pages; i += kThreads) {
    const int list = i / a.max_pages, j = i % a.max_pages;
    if (j < a.pages_in(list)) x.mark[a.table[a.list_at(list) + j]] = 1;
  }
  __syncthreads();
  const int distinct = compact_marks(a, x, sm);
  if (distinct > a.slots) {  // refused: nothing changes
    if (t == 0) {
      a.counts[0] = a.counts[1] = 0, a.counts[2] = 1;
      if (a.refused_flag) *a.refused_flag = 1;
    }
    return;
  }
  // 1. Written pages leave the cache.
  for (int w = t; w < a.num_written; w += kThreads) {
    const int32_t p = a.written[w], s = a.slot_of_page[p];
    if (s >= 0) {
      a.slot_of_page[p] = -1;
      a.page_in_slot[s] = -1;
      a.last_used[s] = -1;
    }
  }
  if (t == 0) n_hits = n_misses = 0;
  __syncthreads();
  // 2. Hits stamped; the misses listed in ascending id.
  for (int base = 0; base < distinct; base += kThreads) {
    const int i = base + t;
    const int32_t p = i < distinct ? x.pages[i] : -1, s = p >= 0 ? a.slot_of_page[p] : -1;
    const bool miss = p >= 0 && s < 0;
    if (p >= 0 && s >= 0) a.last_used[s] = step;
    int pos, total;
    Scan(sm.scan).ExclusiveSum(int(miss), pos, total);
    if (miss) x.misses[n_misses + pos] = p;
    __syncthreads();
    if (t == 0) n_misses += total, n_hits += min(kThreads, distinct - base) - total;
    __syncthreads();
  }
  const int k = n_misses;
  // 3. The k least recently used unstamped slots, in ascending slot order: the largest
  // "steps since last use" (free slots the largest), ties to the lower slot.
  if (k > 0) {
    const auto age = [&](int s) {
      const int64_t used = a.last_used[s];
      if (used >= step) return 0u;  // stamped this step: never a victim
      const int64_t since = step - used;  // >= 1; a free slot (-1) is the oldest
      return since >= int64_t(0xFFFFFFFFu) ? 0xFFFFFFFFu : uint32_t(since);
    };
    page_select::select_top_pages_of(sm, age, a.slots, k, [&](int s, int rank) { x.victims[rank] = s; }, [](int) {});
  }
  __syncthreads();
  for (int i = t; i < k; i += kThreads) {
    const int32_t s = x.victims[i], p = x.misses[i], old = a.page_in_slot[s];
    if (old >= 0) a.slot_of_page[old] = -1;
    a.page_in_slot[s] = p;
    a.slot_of_page[p] = s;
    a.last_used[s] = step;
    a.copy_page[i] = p;
    a.copy_slot[i] = s;
  }
  if (t == 0) {
    a.counts[0] = k, a.counts[1] = n_hits, a.counts[2] = 0;
    if (a.totals) a.totals[0] += (unsigned long long)k, a.totals[1] += (unsigned long long)n_hits;  // one CTA: no race
  }
  __syncthreads();
  // 4. The lists as slots.
  for (int i = t; i < a.lists * a.max_pages; i += kThreads) {
    const int list = i / a.max_pages, j = i % a.max_pages;
    if (j < a.pages_in(list)) a.slot_table[a.slot_at(list) + j] = a.slot_of_page[a.table[a.list_at(list) + j]];
  }
}

// A CTA per copy (past counts[0]: nothing): a page of K and of V in 16-byte pieces, host pages
// host_stride pieces apart.
__global__ void gather_kernel(const int32_t* copy_page, const int32_t* copy_slot, const int32_t* counts,
                              const uint4* host_k, const uint4* host_v, uint4* slot_k, uint4* slot_v, size_t pieces,
                              size_t host_stride) {
  const int i = blockIdx.x;
  if (i >= counts[0]) return;
  const size_t from = size_t(copy_page[i]) * host_stride, to = size_t(copy_slot[i]) * pieces;
  for (size_t e = threadIdx.x; e < pieces; e += blockDim.x) {
    slot_k[to + e] = host_k[from + e];
    slot_v[to + e] = host_v[from + e];
  }
}

// A thread per row: its written page; thread 0 advances the step.
__global__ void begin_step_kernel(int64_t* counter, const int32_t* positions, const int32_t* page_table, int n,
                                  int max_pages_per_seq, int page_size, int32_t* written) {
  const int r = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (r == 0) *counter += 1;
  if (r < n) written[r] = page_table[size_t(r) * max_pages_per_seq + positions[r] / page_size];
}

}  // namespace

cudaError_t page_cache_begin_step(int64_t* counter, const int32_t* positions, const int32_t* page_table, int n,
                                  int max_pages_per_seq, int page_size, int32_t* written, cudaStream_t stream) {
  if (n < 0 || page_size <= 0 || max_pages_per_seq <= 0) return cudaErrorInvalidValue;
  begin_step_kernel<<<(std::max(n, 1) + 127) / 128, 128, 0, stream>>>(counter, positions, page_table, n,
                                                                       max_pages_per_seq, page_size, written);
  return cudaGetLastError();
}

size_t page_cache_workspace_size(int num_host_pages, int slots) {
  if (num_host_pages <= 0 || slots <= 0) return 0;
  size_t bytes = 0;
  carve(nullptr, num_host_pages, slots, &bytes);
  return bytes;
}

cudaError_t page_cache_map(const PageCacheArgs& a, const PageCacheWorkspace& ws, cudaStream_t stream) {
  if (a.lists < 0 || a.max_pages <= 0 || a.slots <= 0 || a.num_host_pages <= 0 || a.num_written < 0 ||
      (!a.list_pages && (!a.list_lens || a.page_size <= 0)) ||
      ws.data == nullptr || ws.bytes < page_cache_workspace_size(a.num_host_pages, a.slots))
    return cudaErrorInvalidValue;
  map_kernel<<<1, kThreads, 0, stream>>>(a, carve(ws.data, a.num_host_pages, a.slots, nullptr));
  return cudaGetLastError();
}

cudaError_t page_cache_gather(const int32_t* copy_page, const int32_t* copy_slot, const int32_t* counts, int max_copies,
                              const uint16_t* host_k, const uint16_t* host_v, uint16_t* slot_k, uint16_t* slot_v,
                              size_t page_elems, size_t host_page_stride, cudaStream_t stream) {
  if (host_page_stride == 0) host_page_stride = page_elems;
  if (max_copies < 0 || page_elems % 8 != 0 || host_page_stride % 8 != 0 || host_page_stride < page_elems)
    return cudaErrorInvalidValue;
  if (max_copies == 0) return cudaSuccess;
  gather_kernel<<<max_copies, 256, 0, stream>>>(copy_page, copy_slot, counts, reinterpret_cast<const uint4*>(host_k),
                                                reinterpret_cast<const uint4*>(host_v), reinterpret_cast<uint4*>(slot_k),
                                                reinterpret_cast<uint4*>(slot_v), page_elems / 8, host_page_stride / 8);
  return cudaGetLastError();
}

}  // namespace skim::cuda
