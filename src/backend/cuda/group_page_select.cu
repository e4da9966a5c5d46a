// Group page selection kernels (see group_page_select.cuh).
#include "backend/cuda/group_page_select.cuh"

#include <cuda_bf16.h>


#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/page_select_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/segment_sort.cuh"
#include "backend/cuda/segment_sort_block.cuh"

namespace skim::cuda {

namespace {

using namespace page_select;

// The workspace: the page keys; with by_score also the kept pages' keys ([lists][max_pages_per_seq]),
// the lists' segments [begin, end) and the sort's scratch (segment_sort.cuh).
struct Layout {
  size_t slots, sort_keys, begin, end, scratch, scratch_bytes, bytes;
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

Layout layout_of(const GroupPageSelectArgs& a) {
  Layout l{};
  const size_t lists = size_t(a.batch) * a.num_kv_heads;
  l.slots = lists * a.max_pages_per_seq;
  l.sort_keys = align256(l.slots * 4);
  l.begin = l.sort_keys + align256(l.slots * 4);
  l.end = l.begin + align256(lists * 4);
  l.scratch = l.end + align256(lists * 4);
  l.bytes = a.by_score ? l.scratch : l.slots * 4;
  if (a.by_score && lists > 0) {
    l.scratch_bytes = segment_sort_scratch_bytes(int(l.slots), int(lists), a.pages_kept(a.max_pages_per_seq));
    l.bytes = l.scratch + align256(l.scratch_bytes);
  }
  return l;
}

// Page p's key of m: the newest page highest, then the other forced (n_local) pages, then the
// bound's order-preserving key.
__device__ __forceinline__ uint32_t page_key(const GroupPageSelectArgs& a, int p, int m, float bound) {
  return p == m - 1 ? kNewestKey : p >= m - min(a.n_local, m) ? kForcedKey : order_key(bound);
}

__device__ __forceinline__ uint32_t* keys_of(const GroupPageSelectArgs& a, int b, int kvh) {
  return static_cast<uint32_t*>(a.workspace) + (size_t(b) * a.num_kv_heads + kvh) * a.max_pages_per_seq;
}

// Grid (page blocks, KV heads, batch): a warp scores kWarpPages pages for the group's
// pooled query (page_select_common.cuh), then the forced pages get keys above every bound.
template <int D>
__global__ void __launch_bounds__(kScoreWarps * 32, kScoreMinCtas) score_kernel(const GroupPageSelectArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = blockIdx.y, b = blockIdx.z, group = a.group_size();
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const int m = pages_of(len, a.page_size);
  const int p0 = blockIdx.x * kPagesPerScoreCta + warp * kWarpPages;
  if (p0 >= m || !a.rows.has(b)) return;
  const float s = warp_page_bounds<D>(a.q + (size_t(b) * a.num_heads + size_t(kvh) * group) * D, group, a.kmin,
                                      a.kmax, a.num_kv_heads, kvh, a.page_table + size_t(b) * a.max_pages_per_seq,
                                      p0, m, lane);
  if (lane < kWarpPages && p0 + lane < m) keys_of(a, b, kvh)[p0 + lane] = page_key(a, p0 + lane, m, s);
}

// by_score: where the kept pages' keys go, and each list's segment for the sort.
struct SortOut {
  uint32_t* keys = nullptr;  // [lists][max_pages_per_seq]
  int* begin = nullptr;
  int* end = nullptr;
};

// The list of (sequence b, KV head kvh): the top pages_kept(m) of its page keys, written in
// position order by select(m, n, keep_run) (the radix select over wherever the keys are, handing
// each thread's run of kItems consecutive pages at once). EXTRAS: the masks and the sort keys
// (from `keys`) may be written too. Without them the selection is the plain one it was before
// they came: their per-page branches in the unrolled walk take it from 64 registers to 104, and
// gbsa's select+attend measured 1.4-6.8% slower since (H100,
// bench/results/2026-11-25-h100-nothing-lost/). Every thread of the CTA calls it; it returns the
// count of pages listed.
template <bool EXTRAS, class Select>
__device__ __forceinline__ int write_list(const GroupPageSelectArgs& a, const SortOut& so, int b, int kvh,
                                           const uint32_t* keys, Select select) {
  const int t = threadIdx.x;
  const size_t list = size_t(b) * a.num_kv_heads + kvh;
  const int first = int(list) * a.max_pages_per_seq;
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const int m = pages_of(len, a.page_size), n = a.pages_kept(m);
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  int32_t* out = a.out_table + list * a.max_pages_per_seq;
  uint32_t* masks = a.out_masks ? a.out_masks + list * a.max_pages_per_seq : nullptr;
  if (t == 0) a.out_lens[list] = m == 0 ? 0 : (n - 1) * a.page_size + (len - (m - 1) * a.page_size);
  if (so.keys && t == 0) so.end[list] = first + n;
  const auto store = [&](int rank, int32_t id, uint32_t key) {
    out[rank] = id;
    if constexpr (EXTRAS) {
      if (masks) masks[rank] = ~0u;  // every head of the group attends the group's pages
      if (so.keys) so.keys[first + rank] = key;
    }
  };
  if (n == m) {  // every page kept (short sequences)
    for (int p = t; p < m; p += kThreads) store(p, table[p], EXTRAS && so.keys ? keys[p] : 0u);
    return n;
  }
  // A run's kept pages: every page id and key loaded before any is stored, one round trip for
  // the run (page by page, a thread's kept pages were as many dependent round trips).
  select(m, n, [&](int p0, unsigned keep_bits, int rank) {
    int32_t ids[kItems];
    uint32_t sort_keys[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const bool kept = keep_bits >> i & 1u;
      ids[i] = kept ? table[p0 + i] : 0;
      sort_keys[i] = EXTRAS && kept && so.keys ? keys[p0 + i] : 0u;
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (keep_bits >> i & 1u) store(rank++, ids[i], sort_keys[i]);
  });
  return n;
}

// One CTA per (KV head, sequence): its list from the score kernel's keys. SORT (by_score, lists
// of at most kCtaSortItems): the CTA then sorts its list by descending key itself, in the shared
// memory the selection is done with, where a sort kernel of its own (6.3 us under ncu) reloaded
// the list after a launch: gbsa+art's attention step at b8 32K 79.9 -> 76.5 us (H200, 2026-11-28).
// CTAs an SM holds: the plain selection keeps to 64 registers (two CTAs an SM at large batches);
// the sorting one asks for one (ptxas's own choice was 64 registers with spills).
template <bool EXTRAS, bool SORT>
__global__ void __launch_bounds__(kThreads, EXTRAS ? 1 : 2)
    select_kernel(const GroupPageSelectArgs a, const SortOut so) {
  static_assert(!SORT || (EXTRAS && kThreads == segment_sort::kSortThreads), "the sort runs on the select CTA");
  detail::pdl_enter();  // launched by launch_pdl
  __shared__ union {
    SelectSmem select;
    segment_sort::BitonicStorage sort;
  } sm;
  const int kvh = blockIdx.x, b = blockIdx.y;
  const size_t list = size_t(b) * a.num_kv_heads + kvh;
  const int first = int(list) * a.max_pages_per_seq;
  if (so.keys && threadIdx.x == 0) so.begin[list] = so.end[list] = first;  // rows not planned: nothing to sort
  if (!a.rows.has(b)) return;
  const uint32_t* keys = keys_of(a, b, kvh);
  const int listed = write_list<EXTRAS>(
      a, so, b, kvh, keys, [&](int m, int n, auto keep_run) { select_top_page_runs(sm.select, keys, m, n, keep_run); });
  if constexpr (SORT) segment_sort::sort_list_in_cta({.keys = so.keys, .values = a.out_table}, first, listed, sm.sort);
}

bool supported(const GroupPageSelectArgs& a) {
  return a.batch >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
         (a.head_dim == 64 || a.head_dim == 128) && a.page_size > 0 && a.max_pages_per_seq > 0 && a.n_min >= 1 &&
         a.n_local >= 0 && a.keep > 0 && a.keep <= 1;
}

}  // namespace

size_t group_page_select_workspace_size(const GroupPageSelectArgs& a) {
  return supported(a) ? layout_of(a).bytes : 0;
}

cudaError_t group_page_select(const GroupPageSelectArgs& a, cudaStream_t stream) {
  if (!supported(a) || a.workspace == nullptr || a.workspace_bytes < group_page_select_workspace_size(a))
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  const cudaError_t e = launch_scores(score_kernel<64>, score_kernel<128>, a, a.num_kv_heads, stream);
  if (e != cudaSuccess) return e;
  const Layout l = layout_of(a);
  char* ws = static_cast<char*>(a.workspace);
  SortOut so;
  if (a.by_score) {
    so.keys = reinterpret_cast<uint32_t*>(ws + l.sort_keys);
    so.begin = reinterpret_cast<int*>(ws + l.begin);
    so.end = reinterpret_cast<int*>(ws + l.end);
  }
  const dim3 grid(a.num_kv_heads, a.batch);
  // by_score: each list's kept pages by descending key, in place (their masks are all ~0u); the
  // sort is stable, so equal keys (the forced pages, ties) stay in position order, as on the
  // CPU. Lists that fit the select CTA's sort are sorted there; longer ones by a sort of their own.
  const int lists = a.batch * a.num_kv_heads, longest = a.pages_kept(a.max_pages_per_seq);
  const bool sort_in_select = a.by_score && longest <= kCtaSortItems;
  if (sort_in_select)
    (void)launch_pdl(select_kernel<true, true>, grid, kThreads, 0, stream, a, so);
  else if (a.by_score || a.out_masks)
    (void)launch_pdl(select_kernel<true, false>, grid, kThreads, 0, stream, a, so);
  else
    (void)launch_pdl(select_kernel<false, false>, grid, kThreads, 0, stream, a, so);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || !a.by_score || sort_in_select) return err;
  return segment_sort_desc({.lists = lists, .total = int(l.slots), .max_items = longest, .keys = so.keys,
                            .values = a.out_table, .begin = so.begin, .end = so.end, .scratch = ws + l.scratch,
                            .scratch_bytes = l.scratch_bytes},
                           stream);
}

}  // namespace skim::cuda
