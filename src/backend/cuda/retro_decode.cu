// RetroAttention's decode-stage kernels (see retro_decode.cuh).
#include "backend/cuda/retro_decode.cuh"

#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>

#include "backend/cuda/page_index_map.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/retro_merge_state.cuh"

#include <cstdint>

namespace skim::cuda {

namespace {

// plan_kernel's CTA: a list in one pass up to 1024 pages (quest 0.1's union at 32K is about 620
// pages a KV head).
constexpr int kPlanThreads = 1024;
using PlanScan = cub::BlockScan<int, kPlanThreads>;

__device__ __forceinline__ int pages_of(int len, int ps) { return (len + ps - 1) / ps; }

// What a plan CTA reads of its row before anything else, loaded together: at batch 1 the kernel
// is a chain of dependent loads, and these depend on nothing but the row (and the rule).
struct PlanRow {
  int slot, newest, past;  // past: the row before when it is this row's past row, else -1
  int step, behind, current;
  bool sparse, per_head;
  // The selection unit of KV head h's g-th query head (RetroPagePlanArgs::unit_of, the rule
  // already loaded).
  __device__ int unit(int h, int g, int group) const { return per_head ? h * group + g : h; }
};

__device__ __forceinline__ PlanRow load_row(const RetroPagePlanArgs& a, int b) {
  const int slot = a.row_slot[b], newest = a.newest_row[b], step = a.retro_step[b], len = a.seq_lens[b];
  const int prev_slot = b > 0 ? a.row_slot[b - 1] : -1, prev_newest = b > 0 ? a.newest_row[b - 1] : -1;
  const int prev_step = b > 0 ? a.retro_step[b - 1] : 0;
  const bool per_head = a.per_head_of(b), sparse = slot >= 0 && a.sparse_of(b);
  const int past = slot >= 0 && prev_slot == slot && prev_newest == b ? b - 1 : -1;
  return {.slot = slot, .newest = newest, .past = past, .step = sparse ? step : 0,
          .behind = past >= 0 ? step - prev_step : 0, .current = (len - 1) / a.page_size, .sparse = sparse,
          .per_head = per_head};
}

// The selection-unit masks A of row b (newest, sparse layer) at one listed page: the page's
// position i returns each selecting head's old value into `age` and gets `step`. The current
// page's old value is step - 1 for every unit (Algorithm 2 sets it first); a unit whose heads do
// not select it keeps that value. Returns the heads whose age is beyond `behind` (a past row's
// unseen heads at this page, for a folded plan), from registers; `age` null (folded: no
// plan_past reads it) stores none.
__device__ __forceinline__ uint32_t update_page(const RetroPagePlanArgs& a, const PlanRow& r, int h, int i,
                                                uint32_t mask, uint8_t* age) {
  const int group = a.group_size();
  uint32_t unseen = 0;
  for (int g = 0; g < group; ++g) {  // 0: not selected, never unseen
    const int old = i == r.current ? r.step - 1 : a.masks.of(r.slot, r.unit(h, g, group))[i];
    const int aged = (mask >> g & 1u) ? max(0, min(255, r.step - old)) : 0;
    if (age) age[g] = uint8_t(aged);
    unseen |= uint32_t(aged > r.behind) << g;
  }
  for (int g = 0; g < group; ++g)
    if (r.per_head || g == 0) {
      int32_t* m = a.masks.of(r.slot, r.unit(h, g, group)) + i;
      if (mask >> g & 1u)
        *m = r.step;
      else if (i == r.current)
        *m = r.step - 1;
    }
  return unseen;
}

// A past row's heads at a page of its newest row's list: bit g when head g has not seen it
// (the age its selection returned is beyond the row's distance, `behind`).
__device__ __forceinline__ uint32_t unseen_heads(const uint8_t* age, int group, int behind) {
  uint32_t mask = 0;
  for (int g = 0; g < group; ++g) mask |= uint32_t(age[g] > behind) << g;
  return mask;
}

// What a plan CTA's thread reads first of KV head h's base list of row b: its length and the
// thread's entry of the first pass (entries past the length are in the table's row, unused).
struct BaseHead {
  int len = 0;
  int32_t page = 0;
  uint32_t mask = ~0u;
};

__device__ __forceinline__ BaseHead load_base_head(const RetroPagePlanArgs& a, int b, int h) {
  const int t = threadIdx.x, stride = a.max_pages_per_seq;
  const size_t base = a.base_list(b, h);
  BaseHead x;
  x.len = a.base_lens[base];
  if (t < stride) x.page = a.base_table[base * stride + t];
  if (a.base_masks && t < stride) x.mask = a.base_masks[base * stride + t];
  return x;
}

// A newest row's list (kPlanThreads entries a pass): its base list (`head` its first loads), and
// in a sparse layer each listed page's old value per head recorded and its units' masks loaded
// (update_page). Pages of one list are distinct, so no two threads touch one position's A. Folded (a.folded()), its past
// row (r.past, if any) gets its unseen heads in the mask's bits above the row's own, and the
// pages some of them attend are counted into `unseen_pages` (shared memory).
__device__ void plan_newest(const RetroPagePlanArgs& a, int b, int h, const PlanRow& r, const BaseHead& head,
                            int* unseen_pages) {
  const int t = threadIdx.x, ps = a.page_size, group = a.group_size(), stride = a.max_pages_per_seq;
  const size_t list = size_t(b) * a.num_kv_heads + h, at = list * stride;
  const size_t base = a.base_list(b, h);
  const int len = head.len, n = pages_of(len, ps);
  int32_t page = head.page;
  uint32_t mask = head.mask;
  const bool fold_past = a.folded() && r.sparse && r.past >= 0;
  const uint32_t own = a.folded() ? (1u << group) - 1 : ~0u;
  const int32_t* inv = static_cast<const int32_t*>(a.workspace);
  // The current page unlisted (the bases always keep it: a guard) gets step - 1 for every unit
  // below. Its loads go out with the list's (thread 0's first entry is the list's first): after
  // the loop's stores they were a round trip of their own.
  bool current_unlisted = false;
  if (t == 0 && r.sparse) {
    const int32_t cur = a.page_table[size_t(b) * stride + r.current];
    const int32_t last = n > 0 ? a.base_table[base * stride + n - 1] : -1;
    current_unlisted = !(n > 0 && (page == cur || last == cur));
  }
  for (int k = t; k < n; k += kPlanThreads) {
    if (k != t) {
      page = a.base_table[base * stride + k];
      mask = a.base_masks ? a.base_masks[base * stride + k] : ~0u;
    }
    a.out_table[at + k] = page;
    uint8_t* age = a.folded() ? nullptr : a.age + (at + k) * group;
    const uint32_t unseen = r.sparse ? update_page(a, r, h, inv[page], mask, age) : 0u;
    if (fold_past) {  // one shared atomic a warp, not one a page
      const unsigned lanes = __activemask(), some = __ballot_sync(lanes, unseen != 0u);
      if (some && int(threadIdx.x & 31) == __ffs(lanes) - 1) atomicAdd(unseen_pages, __popc(some));
    }
    a.out_masks[at + k] = (mask & own) | (fold_past ? unseen << group : 0u);
  }
  if (t != 0) return;
  a.out_lens[list] = len;
  if (a.listed_tokens && r.slot >= 0) atomicAdd(a.listed_tokens, (unsigned long long)len);
  if (current_unlisted)
    for (int g = 0; g < group; ++g)
      if (r.per_head || g == 0) a.masks.of(r.slot, r.unit(h, g, group))[r.current] = r.step - 1;
}

// Past row b's list: its newest row nr's pages with an old value below its step, per head, in
// that list's order (nothing in a dense layer).
__device__ void plan_past(const RetroPagePlanArgs& a, int b, int nr, int h, PlanScan::TempStorage& scan) {
  const int t = threadIdx.x, group = a.group_size(), ps = a.page_size;
  const size_t list = size_t(b) * a.num_kv_heads + h, at = list * a.max_pages_per_seq;
  if (!a.sparse_of(b)) {
    if (t == 0) a.out_lens[list] = 0;
    return;
  }
  const int behind = a.retro_step[nr] - a.retro_step[b];
  const size_t newest = (size_t(nr) * a.num_kv_heads + h) * a.max_pages_per_seq;
  const int n = pages_of(a.out_lens[size_t(nr) * a.num_kv_heads + h], ps);
  int written = 0;
  for (int k0 = 0; k0 < n; k0 += kPlanThreads) {
    const int k = k0 + t;
    const uint32_t mask = k < n ? unseen_heads(a.age + (newest + k) * group, group, behind) : 0u;
    int pos, total;
    PlanScan(scan).ExclusiveSum(mask ? 1 : 0, pos, total);
    __syncthreads();
    if (mask) {
      a.out_table[at + written + pos] = a.out_table[newest + k];
      a.out_masks[at + written + pos] = mask;
    }
    written += total;
  }
  if (t == 0) {
    a.out_lens[list] = written * ps;  // whole pages: the current page is never unseen
    if (a.supplement_tokens) atomicAdd(a.supplement_tokens, (unsigned long long)(written * ps));
  }
}

// Folded: KV head h's query heads of newest row b, then those of its past row, as folded_q's
// row b holds them (RetroPagePlanArgs::folded_q), 16 bytes a thread: this thread's part loaded
// (load) with the row's own loads, the past row's speculatively from the row before (which
// exists), and stored (store) zeroed where the row has no past row. Loaded after the plan's
// stores, the queries were a round trip of their own on the kernel's chain.
struct FoldedQuery {
  uint4 v = make_uint4(0, 0, 0, 0);
  int g2 = 0, e = 0;  // the folded head (0 .. 2 group - 1) and element
  bool mine = false;  // this thread holds a part (2 group head_dim / 8 threads do)

  __device__ void load(const RetroPagePlanArgs& a, int b, int h) {
    const int group = a.group_size(), d = a.head_dim, i = threadIdx.x;
    mine = i < 2 * group * d / 8;  // 128 at most (retro_fold_fits, head_dim <= 128) of kPlanThreads
    if (!mine) return;
    g2 = i * 8 / d, e = i * 8 % d;
    const int row = g2 < group ? b : b - 1;
    if (row >= 0) v = *reinterpret_cast<const uint4*>(a.q + (size_t(row) * a.num_heads + h * group + g2 % group) * d + e);
  }
  __device__ void store(const RetroPagePlanArgs& a, int b, int h, int past) const {
    if (!mine) return;
    const int group = a.group_size(), d = a.head_dim, H = a.num_heads;
    const uint4 x = g2 < group || past >= 0 ? v : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(a.folded_q + (size_t(b) * 2 * H + h * 2 * group + g2) * d + e) = x;
  }
};

// One CTA per (KV head, row that is not a past one): its list (plan_newest), then, once the
// CTA's writes are visible to it (the barrier), the lists of its sequence's past rows (the rows
// just before it naming it their newest, plan_past). One launch where the newest rows' chunks
// and the past rows were two (the second waited for every CTA of the first).
//
// Folded (a.folded()): a sequence has at most one past row, the row before its newest; the
// newest row's CTA lists it in its own masks (plan_newest), leaves its lists empty, and copies
// the KV head's queries of both rows into folded_q (FoldedQuery).
__global__ void __launch_bounds__(kPlanThreads) plan_kernel(const RetroPagePlanArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  __shared__ PlanScan::TempStorage scan;
  __shared__ int unseen_pages;
  const int h = blockIdx.x, b = blockIdx.y;
  const bool folded = a.folded();
  FoldedQuery fq;
  if (folded) fq.load(a, b, h);
  // The base list's first loads beside the row's, where every row has a base list (no base_row:
  // a past row's are read and unused); through base_row only a newest row's.
  BaseHead head;
  if (!a.base_row) head = load_base_head(a, b, h);
  const PlanRow r = load_row(a, b);
  if (r.slot >= 0 && r.newest != b) return;  // a past row: its newest row's CTA plans it
  if (a.base_row) head = load_base_head(a, b, h);
  if (threadIdx.x == 0) unseen_pages = 0;
  __syncthreads();
  plan_newest(a, b, h, r, head, &unseen_pages);
  if (folded) fq.store(a, b, h, r.past);
  if (r.slot < 0) return;
  __syncthreads();
  if (folded) {
    if (threadIdx.x == 0 && r.past >= 0) {
      a.out_lens[size_t(r.past) * a.num_kv_heads + h] = 0;
      if (a.supplement_tokens) atomicAdd(a.supplement_tokens, (unsigned long long)unseen_pages * a.page_size);
    }
    return;
  }
  for (int pb = b - 1; pb >= 0 && a.row_slot[pb] == r.slot && a.newest_row[pb] == b; --pb)
    plan_past(a, pb, b, h, scan);
}

// One CTA of head_dim threads per (row, query head), a thread an element
// (retro_merge_elements). A rule's cache has w entries, so the entry a newest row writes is none
// its past rows read: every row merges in one launch.
__global__ void merge_kernel(const RetroMergeArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
  const detail::RetroMergeTarget target = detail::retro_merge_target(a, b, h);
  const size_t src = a.state_of(b, h, target.past);  // the kernel's state (folded or not)
  const float o[1] = {a.o[src * a.head_dim + t]};
  const detail::RetroCached<1> cached = detail::retro_load_cached<1>(a, target, t);
  detail::retro_merge_elements(a, target, t, o, a.lse[src], cached, [] { __syncthreads(); });
}

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

size_t retro_page_plan_workspace_size(const RetroPagePlanArgs& a) {
  return a.num_pool_pages > 0 ? align256(size_t(a.num_pool_pages) * sizeof(int32_t)) : 0;
}

cudaError_t retro_page_plan(const RetroPagePlanArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.group_size() > 32 ||
      a.page_size <= 0 || a.max_pages_per_seq <= 0 || a.workspace == nullptr ||
      a.workspace_bytes < retro_page_plan_workspace_size(a) || retro_page_plan_workspace_size(a) == 0 ||
      (a.folded() && (a.q == nullptr || 2 * a.group_size() > 8 || (a.head_dim != 64 && a.head_dim != 128))))
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  if (!a.index_ready)
    page_index_map(a.page_table, a.seq_lens, a.batch, a.max_pages_per_seq, a.page_size,
                   static_cast<int32_t*>(a.workspace), stream);
  (void)launch_pdl(plan_kernel, dim3(a.num_kv_heads, a.batch), kPlanThreads, 0, stream, a);
  return cudaGetLastError();
}

bool retro_merge_supported(const RetroMergeArgs& a) {
  // One launch needs the newest rows' entries apart from their past rows' (a rule's w entries);
  // without rules the cache may have w - 1 (the CPU policy's layout): not for these kernels.
  return a.batch >= 0 && a.num_heads > 0 && (a.head_dim == 64 || a.head_dim == 128) && a.fold_group >= 0 &&
         (a.fold_group == 0 || (a.num_heads % a.fold_group == 0 && a.newest_row != nullptr)) &&
         (a.rules != nullptr || a.row_slot == nullptr);
}

cudaError_t retro_merge(const RetroMergeArgs& a, cudaStream_t stream) {
  if (!retro_merge_supported(a)) return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  (void)launch_pdl(merge_kernel, dim3(a.num_heads, a.batch), a.head_dim, 0, stream, a);
  return cudaGetLastError();
}

}  // namespace skim::cuda
