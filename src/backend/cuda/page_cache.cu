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

// The slots a prefetch may take: those last used before `step` (free ones too). The step's own
// map needs no count: its misses always fit beside its hits. Returns it to every thread.
__device__ int evictable_slots(const PageCacheArgs& a, int64_t step, SelectScratch& sm) {
  using Scan = SelectScratch::Scan;
  int mine = 0;
  for (int s = threadIdx.x; s < a.slots; s += kThreads) mine += a.last_used[s] < step;
  int pos, total;
  __syncthreads();  // sm.scan was the hits pass's
  Scan(sm.scan).ExclusiveSum(mine, pos, total);
  __syncthreads();
  return total;
}

// Cache c's arguments and scratch of a batch (PageCacheBatch): every per-cache array offset.
__device__ PageCacheArgs cache_args(PageCacheArgs a, const PageCacheBatch& b, int c) {
  a.table += size_t(c) * b.table;
  a.slot_table += size_t(c) * b.slot_table;
  if (a.list_pages) a.list_pages += size_t(c) * b.lens;
  if (a.list_lens) a.list_lens += size_t(c) * b.lens;
  a.slot_of_page += size_t(c) * a.num_host_pages;
  a.page_in_slot += size_t(c) * a.slots;
  a.last_used += size_t(c) * a.slots;
  a.copy_page += size_t(c) * a.slots;
  a.copy_slot += size_t(c) * a.slots;
  a.counts += size_t(c) * 3;
  return a;
}
__device__ Scratch cache_scratch(Scratch x, size_t bytes, int c) {
  const auto at = [&](auto* p) { return reinterpret_cast<decltype(p)>(reinterpret_cast<char*>(p) + size_t(c) * bytes); };
  return {at(x.mark), at(x.pages), at(x.misses), at(x.victims)};
}

__global__ void __launch_bounds__(kThreads)
    map_kernel(const PageCacheArgs args, const PageCacheBatch batch, const Scratch scratch, size_t scratch_bytes) {
  const PageCacheArgs a = cache_args(args, batch, int(blockIdx.x));
  const Scratch x = cache_scratch(scratch, scratch_bytes, int(blockIdx.x));
  __shared__ SelectScratch sm;
  __shared__ int n_hits, n_misses;
  using Scan = SelectScratch::Scan;
  const int t = threadIdx.x;
  // A prefetch stamps as the step before (kv/page_cache_args.h).
  const int64_t step = (a.step_counter ? *a.step_counter : a.step) - (a.prefetch ? 1 : 0);
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
      if (a.refused_flag && !a.prefetch) *a.refused_flag = 1;
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
  // 2. Hits stamped; the misses listed in ascending id. kHitItems consecutive pages a thread
  // (thread order is id order), their slot lookups in flight together: one scan and two
  // barriers a pass of kThreads x kHitItems pages, where a page a thread took a pass each
  // (about 10 dependent passes for quest 5% at 512K).
  constexpr int kHitItems = 8;
  for (int base = 0; base < distinct; base += kThreads * kHitItems) {
    const int i0 = base + t * kHitItems;
    int32_t p[kHitItems], s[kHitItems];
#pragma unroll
    for (int j = 0; j < kHitItems; ++j) p[j] = i0 + j < distinct ? x.pages[i0 + j] : -1;
#pragma unroll
    for (int j = 0; j < kHitItems; ++j) s[j] = p[j] >= 0 ? a.slot_of_page[p[j]] : -1;
    unsigned miss = 0;
#pragma unroll
    for (int j = 0; j < kHitItems; ++j) {
      if (p[j] >= 0 && s[j] >= 0) a.last_used[s[j]] = step;
      if (p[j] >= 0 && s[j] < 0) miss |= 1u << j;
    }
    int pos, total;
    Scan(sm.scan).ExclusiveSum(__popc(miss), pos, total);
#pragma unroll
    for (int j = 0; j < kHitItems; ++j)
      if (miss >> j & 1u) x.misses[n_misses + pos++] = p[j];
    __syncthreads();
    if (t == 0) n_misses += total, n_hits += min(kThreads * kHitItems, distinct - base) - total;
    __syncthreads();
  }
  const int k = a.prefetch ? min(n_misses, evictable_slots(a, step, sm)) : n_misses;
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
    if (a.totals) atomicAdd(&a.totals[0], (unsigned long long)k), atomicAdd(&a.totals[1], (unsigned long long)n_hits);
  }
  __syncthreads();
  // 4. The lists as slots.
  if (a.prefetch) return;
  for (int i = t; i < a.lists * a.max_pages; i += kThreads) {
    const int list = i / a.max_pages, j = i % a.max_pages;
    if (j < a.pages_in(list)) a.slot_table[a.slot_at(list) + j] = a.slot_of_page[a.table[a.list_at(list) + j]];
  }
}

// CTAs (blockIdx.x) striding over a cache's (blockIdx.y) copies, past counts[0] nothing: a page
// of K and of V in 16-byte pieces, host pages host_stride pieces apart. Several pages in flight
// per CTA and a grid of at most a few waves: the reads cross PCIe (about 1-2 us each), so what
// sets the rate is how many are outstanding.
__global__ void __launch_bounds__(256) gather_kernel(const PageGatherArgs a, size_t pieces, size_t host_stride) {
  const int c = int(blockIdx.y);
  const int32_t* copy_page = a.copy_page + size_t(c) * a.max_copies;
  const int32_t* copy_slot = a.copy_slot + size_t(c) * a.max_copies;
  const int n = a.counts[size_t(c) * 3];
  const uint4* host_k = reinterpret_cast<const uint4*>(a.host_k + size_t(c) * a.host_cache_stride);
  const uint4* host_v = reinterpret_cast<const uint4*>(a.host_v + size_t(c) * a.host_cache_stride);
  uint4* slot_k = reinterpret_cast<uint4*>(a.slot_k + size_t(c) * a.slot_cache_stride);
  uint4* slot_v = reinterpret_cast<uint4*>(a.slot_v + size_t(c) * a.slot_cache_stride);
  for (int i = int(blockIdx.x); i < n; i += int(gridDim.x)) {
    const size_t from = size_t(copy_page[i]) * host_stride, to = size_t(copy_slot[i]) * pieces;
    for (size_t e = threadIdx.x; e < pieces; e += blockDim.x) {
      const uint4 k = host_k[from + e], v = host_v[from + e];  // both loads in flight before the stores
      slot_k[to + e] = k;
      slot_v[to + e] = v;
    }
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

size_t page_cache_workspace_size(int num_host_pages, int slots, int caches) {
  if (num_host_pages <= 0 || slots <= 0 || caches <= 0) return 0;
  size_t bytes = 0;
  carve(nullptr, num_host_pages, slots, &bytes);
  return bytes * size_t(caches);
}

cudaError_t page_cache_map(const PageCacheArgs& a, const PageCacheWorkspace& ws, cudaStream_t stream,
                           const PageCacheBatch& batch) {
  if (a.lists < 0 || a.max_pages <= 0 || a.slots <= 0 || a.num_host_pages <= 0 || a.num_written < 0 ||
      batch.caches <= 0 || (!a.list_pages && (!a.list_lens || a.page_size <= 0)) || ws.data == nullptr ||
      ws.bytes < page_cache_workspace_size(a.num_host_pages, a.slots, batch.caches))
    return cudaErrorInvalidValue;
  const size_t one = page_cache_workspace_size(a.num_host_pages, a.slots);
  map_kernel<<<batch.caches, kThreads, 0, stream>>>(a, batch, carve(ws.data, a.num_host_pages, a.slots, nullptr), one);
  return cudaGetLastError();
}

// Copies in flight: up to this many CTAs per cache, each striding over its copies (the H100's 132
// SMs hold 8 of these CTAs each: a layer's 8 KV heads at 128 fill one wave).
constexpr int kGatherCtasPerCache = 128;

cudaError_t page_cache_gather(const PageGatherArgs& a, cudaStream_t stream) {
  const size_t host_stride = a.host_page_stride == 0 ? a.page_elems : a.host_page_stride;
  if (a.max_copies < 0 || a.caches <= 0 || a.ctas_per_cache < 0 || a.page_elems % 8 != 0 || host_stride % 8 != 0 ||
      host_stride < a.page_elems || a.host_cache_stride % 8 != 0 || a.slot_cache_stride % 8 != 0)
    return cudaErrorInvalidValue;
  if (a.max_copies == 0) return cudaSuccess;
  const int ctas = a.ctas_per_cache > 0 ? a.ctas_per_cache : kGatherCtasPerCache;
  const dim3 grid(unsigned(std::min(a.max_copies, ctas)), unsigned(a.caches));
  gather_kernel<<<grid, 256, 0, stream>>>(a, a.page_elems / 8, host_stride / 8);
  return cudaGetLastError();
}

}  // namespace skim::cuda
