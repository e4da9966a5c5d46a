// RetroAttention's plan of a newest row, per listed page (attention/retro_decode_args.h), in the
// two kernels that run it: retro_page_plan's own (retro_decode.cu) and, for a folded step whose
// rows are all Quest's, Quest's union kernel (quest_page_select.cu), which lists the pages itself.
// Device code.
#pragma once

#include <cstdint>

#include "attention/retro_decode_args.h"

namespace skim::cuda::retro_plan {

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
// update_page in its two halves: the old values read (the heads returned, no store), then the
// masks written. A kernel with several pages a thread reads all its pages' first: each page's
// stores would otherwise hold the next page's loads back (a round trip a page).
__device__ __forceinline__ uint32_t page_unseen(const RetroPagePlanArgs& a, const PlanRow& r, int h, int i,
                                                uint32_t mask, uint8_t* age) {
  const int group = a.group_size();
  uint32_t unseen = 0;
  for (int g = 0; g < group; ++g) {  // 0: not selected, never unseen
    const int old = i == r.current ? r.step - 1 : a.masks.of(r.slot, r.unit(h, g, group))[i];
    const int aged = (mask >> g & 1u) ? max(0, min(255, r.step - old)) : 0;
    if (age) age[g] = uint8_t(aged);
    unseen |= uint32_t(aged > r.behind) << g;
  }
  return unseen;
}

// page_unseen's loads alone, for a group of at most MAX_GROUP heads: every load issued where it
// stands (inline PTX, which the compiler neither drops nor sinks into the branch that uses it),
// so that a thread's pages' loads go out together (QuestPageSelect's union: the loads of a
// tile's pages before any is used). Heads past the group read the group's last, a row without
// a slot slot 0's; page_unseen_of ignores both.
template <int MAX_GROUP>
struct PageOld {
  int v[MAX_GROUP];
};

__device__ __forceinline__ int load_pinned(const int32_t* p) {
  int v;
  asm volatile("ld.global.s32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

template <int MAX_GROUP>
__device__ __forceinline__ PageOld<MAX_GROUP> load_page_old(const RetroPagePlanArgs& a, const PlanRow& r, int h, int i) {
  const int group = a.group_size();
  PageOld<MAX_GROUP> old;
#pragma unroll
  for (int g = 0; g < MAX_GROUP; ++g) old.v[g] = load_pinned(a.masks.of(max(r.slot, 0), r.unit(h, min(g, group - 1), group)) + i);
  return old;
}

// page_unseen over loaded old values.
template <int MAX_GROUP>
__device__ __forceinline__ uint32_t page_unseen_of(const RetroPagePlanArgs& a, const PlanRow& r, int i, uint32_t mask,
                                                   const PageOld<MAX_GROUP>& old) {
  const int group = a.group_size();
  uint32_t unseen = 0;
#pragma unroll
  for (int g = 0; g < MAX_GROUP; ++g) {
    const int o = i == r.current ? r.step - 1 : old.v[g];
    const int aged = g < group && (mask >> g & 1u) ? max(0, min(255, r.step - o)) : 0;
    unseen |= uint32_t(aged > r.behind) << g;
  }
  return unseen;
}

__device__ __forceinline__ void mark_page(const RetroPagePlanArgs& a, const PlanRow& r, int h, int i, uint32_t mask) {
  const int group = a.group_size();
  for (int g = 0; g < group; ++g)
    if (r.per_head || g == 0) {
      int32_t* m = a.masks.of(r.slot, r.unit(h, g, group)) + i;
      if (mask >> g & 1u)
        *m = r.step;
      else if (i == r.current)
        *m = r.step - 1;
    }
}

__device__ __forceinline__ uint32_t update_page(const RetroPagePlanArgs& a, const PlanRow& r, int h, int i,
                                                uint32_t mask, uint8_t* age) {
  const uint32_t unseen = page_unseen(a, r, h, i, mask, age);
  mark_page(a, r, h, i, mask);
  return unseen;
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
    mine = i < 2 * group * d / 8;  // 128 at most (retro_fold_fits, head_dim <= 128): a CTA of 128 threads or more
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

}  // namespace skim::cuda::retro_plan
