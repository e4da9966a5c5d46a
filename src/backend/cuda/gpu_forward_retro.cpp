// RetroAttention in the GPU forward (attention/retro_decode_args.h; the CPU form is
// attention/retro.cpp): per layer of a decode step whose batch has retro rows (each sequence's
// last w-1 tokens run again before its newest, all rows of the step's batch),
//   retro_page_plan: the newest rows keep their base lists and load their units' masks; each
//     past row lists the pages selected now it has not seen (rows of other policies pass through);
//   paged decode attention over every row's list (ART's kernel when a row of the step runs ART);
//   retro_merge: the newest rows' states into their caches, the past rows' merged with theirs
//     (as the chunk merge's epilogue where the attention call splits its lists).
// The planner plans the newest rows only (a past row's plan index is InputLayout::kNoPlan).
// A step whose retro rules all have w = 2, where twice a group fits the kernel's tile
// (retro_fold_fits), folds: each past row attends as more query heads of its newest row's
// lists, so the kernel reads those pages once for both rows (retro_fold).
#include "backend/cuda/gpu_forward.h"

#include <algorithm>

#include "backend/cuda/gpu_inputs.h"
#include "backend/cuda/paged_decode_attention.cuh"
#include "backend/cuda/retro_decode.cuh"

namespace skim::cuda {

void GpuForward::reserve_retro(bool& moved) {
  const int entries = planner_->retro_entries();
  if (entries == 0) return;
  retro_.reserve(entries, moved);
  // Over host KV a step maps every row's list: w rows a sequence (entries: the largest w).
  if (host_kv_) host_kv_->reserve_lists(std::min(opt_.max_rows, entries * sequence_rows()), moved);
}

// Whether this pass's retro rows fold (gpu_forward_retro.cpp's header). ART's kernel and the
// host KV's list mapping take the unfolded lists.
bool GpuForward::retro_fold(const DevicePlan& plan) const {
  if (plan.art_rules || host_kv_) return false;
  int window = 0;
  for (int i = 0; i < DecodePlanner::kMaxPolicies; ++i)
    if (pass_.policies >> i & 1u)
      if (const RetroRowRule* r = planner_->retro_rule(i)) window = std::max(window, r->window);
  return retro_fold_fits(window, w_.config.num_heads / w_.config.num_kv_heads);
}

void GpuForward::attend_retro(int l, int n, const DevicePlan& plan, const PagedDecodeArgs& base, cudaStream_t s) {
  const ModelConfig& c = w_.config;
  const InputLayout in(opt_.max_rows);
  const RetroState::Scratch x = retro_.scratch();
  const bool fold = retro_fold(plan);
  const int32_t* row_policy = inputs_.data() + in.policy;
  const int32_t* row_slot = inputs_.data() + in.retro_slot;
  const int32_t* steps = inputs_.data() + in.retro_step;
  const int32_t* newest = inputs_.data() + in.newest_row;
  check(retro_page_plan({.batch = n, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads,
                         .page_size = cache_.shape().page_size, .max_pages_per_seq = opt_.max_pages_per_seq,
                         .rules = plan.retro_rules, .row_policy = row_policy, .layer = l,
                         .num_pool_pages = cache_.shape().num_pages,
                         .index_ready = l > 0,  // layer 0's map serves the step: it depends on the tables alone
                         .workspace = x.workspace,
                         .workspace_bytes = x.workspace_bytes, .page_table = inputs_.data() + in.table,
                         .seq_lens = inputs_.data() + in.seq_lens, .base_per_kv_head = plan.per_kv_head,
                         .base_table = plan.table, .base_lens = plan.lens, .base_masks = plan.head_masks,
                         .row_slot = row_slot, .retro_step = steps, .newest_row = newest, .masks = retro_.masks(l),
                         .age = x.age, .out_table = x.table, .out_lens = x.lens, .out_masks = x.masks,
                         .supplement_tokens = x.tokens, .q = base.q, .folded_q = fold ? x.folded_q : nullptr,
                         .head_dim = c.head_dim},
                        s),
        "retro_page_plan");
  // Every list is within the plan's bound: a newest row's (and another policy's row's) is its
  // base list, a past row's a subset of its newest row's. The pass's context bound instead
  // sized the kernel's chunks for the whole context, idling most CTAs on a sparse base's lists.
  PagedDecodeArgs a = base.with_lists(plan.max_seq_len, x.table, x.lens, x.masks, x.o, x.lse);
  if (fold) {  // a KV head's group: the newest row's heads, then its past row's
    a.num_heads = 2 * c.num_heads;
    a.q = x.folded_q;
  }
  // Over host KV the lists map after the plan, which reads the base's host page ids; past rows
  // rewrote their pages in this layer, so the map copies those again (HostKVSlots::begin_step).
  read_through_cache(l, n, plan, a, s);
  const RetroMergeArgs merge{.batch = n, .num_heads = c.num_heads, .head_dim = c.head_dim, .o = x.o, .lse = x.lse,
                             .out = o_.data(), .out_bf16 = o16_from_attention(), .out_lse = lse_.data(),
                             .row_slot = row_slot, .retro_step = steps, .newest_row = newest,
                             .rules = plan.retro_rules, .row_policy = row_policy, .cache = retro_.cache(l),
                             .fold_group = fold ? c.num_heads / c.num_kv_heads : 0};
  if (plan.art_rules) {  // ART rows pass through whole, in their visiting order
    run_art(a, plan, s);
    check(retro_merge(merge, s), "retro_merge");
    return;
  }
  a.split_rows = pass_.split_rows;  // the newest rows' (past rows count nothing: split_rows())
  // The merge in the chunk merge's launch where the call splits its lists.
  check(paged_decode_attention(a, merge, s), "paged_decode_attention (retro)");
}

}  // namespace skim::cuda
