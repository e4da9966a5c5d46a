// MAC-Attention in the GPU forward (attention/mac_decode_args.h; the CPU form is
// attention/pipeline_mac.cpp): per layer of a decode step whose batch has MAC rows,
//   match (mac_match) -> cut the base plan at each row's prefix end (mac_page_plan) ->
//   paged decode attention over the `below` and `above` lists -> merge with the reused
//   prefixes and push each row's new ring entry (mac_merge_push; without ART, where the
//   attention call splits its lists, its chunk merge does this as its epilogue),
// ART's kernel where a row of the step runs ART: mac+art rows (on the group rule) stop in
// `below`, which mac_page_plan lists in ART's order, and read `above` whole; other policies'
// ART rows pass through whole into `above`.
// all inside the step's graph; rows of other policies pass through whole. A prefill chunk of a
// MAC sequence fills its rings from the chunk's last rows.
//
// Tried on an H100 and not kept (2026-11-26, 8B shape, mac at 0% hits against the previous
// revision in the same run): the dense-base plan fused into the match's launch (the last CTA of
// each (row, KV group) planning: one CTA walks what a grid plans, +0.12 ms a token at b1 32K,
// +0.47 at 128K); with it dropped, `above`'s attention bounded by the band (+2 pages) and the
// rings' advance fused into merge_push's last CTA: equal at 32K, +0.12 ms at 128K b1.
#include "backend/cuda/gpu_forward.h"

#include <cmath>

#include "backend/cuda/gpu_inputs.h"
#include "backend/cuda/mac_decode.cuh"
#include "backend/cuda/paged_decode_attention.cuh"

namespace skim::cuda {

void GpuForward::reserve_mac(bool& moved) {
  const int capacity = planner_->mac_capacity();
  if (capacity == 0) return;
  mac_.reserve(capacity, moved);
  if (host_kv_) host_kv_->reserve_lists(2 * sequence_rows(), moved);  // lists below and above each row's prefix end
  if (q_pre_.size() == 0) {  // qkv_rope_append writes it from now on: graphs captured before do not
    q_pre_.resize(size_t(opt_.max_rows) * w_.config.q_dim());
    if (replicated()) q_pre_own_.resize(size_t(opt_.max_rows) * opt_.shard->q_heads * w_.config.head_dim);
    moved = true;
  }
}

void GpuForward::attend_mac(int l, int n, const DevicePlan& plan, const PagedDecodeArgs& base, cudaStream_t s) {
  const ModelConfig& c = w_.config;
  const InputLayout in(opt_.max_rows);
  const int ps = cache_.shape().page_size;
  const int32_t* row_policy = inputs_.data() + in.policy;
  const int32_t* row_slot = inputs_.data() + in.mac_slot;
  // Without ART the parts below and above the prefix end run as one call of 2n rows (above's
  // lists and states packed right after below's; the attention workspace is sized for it). Over
  // host KV they are packed either way: one map reads both parts' lists.
  const bool one_call = !plan.art_rules;
  const MacState::Scratch x = one_call || host_kv_ ? mac_.packed_scratch(n) : mac_.scratch();
  const MacRingsView rings = mac_.rings(l);
  check(mac_match({.batch = n, .num_heads = c.num_heads, .head_dim = c.head_dim, .page_size = ps,
                   .q_pre = q_pre_.data(), .positions = inputs_.data() + in.positions, .row_slot = row_slot, .row_policy = row_policy, .rules = plan.mac_rules,
                   .rings = rings, .band_begin = x.band_begin, .hit_entry = x.hit_entry, .bytes = x.bytes + 1,
                   .forced_hits = mac_forced_hits_},
                  s),
        "mac_match");
  const bool base_is_table = !plan.per_kv_head && !plan.head_masks && plan.table == inputs_.data() + in.table &&
                             plan.lens == inputs_.data() + in.seq_lens;
  check(mac_page_plan({.batch = n, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads, .page_size = ps,
                       .max_pages_per_seq = opt_.max_pages_per_seq, .rules = plan.mac_rules,
                       .row_policy = row_policy, .page_table = inputs_.data() + in.table,
                       .seq_lens = inputs_.data() + in.seq_lens, .base_per_kv_head = plan.per_kv_head,
                       .base_table = plan.table, .base_lens = plan.lens, .base_masks = plan.head_masks,
                       .base_is_table = base_is_table,
                       .band_begin = x.band_begin, .below_table = x.below_table, .below_lens = x.below_lens,
                       .above_table = x.above_table, .above_lens = x.above_lens, .below_masks = x.below_masks,
                       .above_masks = x.above_masks,
                       .below_listed = plan.mac_art ? x.below_listed : nullptr,
                       .rows = PlanRows{row_policy, plan.mac_policies},
                       .listed_tokens = x.bytes, .num_pool_pages = cache_.shape().num_pages,
                       .index_ready = mac_index_made_, .workspace = x.plan_workspace,
                       .workspace_bytes = x.plan_workspace_bytes},
                      s),
        "mac_page_plan");
  mac_index_made_ |= !base_is_table;  // a selecting layer's plan made the step's page index map

  // Both parts: every list of the row's keys, whatever its base's bound (a hit's band reaches
  // past a streaming window), so the pass's context bound.
  PagedDecodeArgs below =
      base.with_lists(pass_.max_seq_len, x.below_table, x.below_lens, x.below_masks, x.below_o, x.below_lse);
  PagedDecodeArgs above =
      base.with_lists(pass_.max_seq_len, x.above_table, x.above_lens, x.above_masks, x.above_o, x.above_lse);
  if (host_kv_ && plan.per_kv_head) {
    // Over host KV a selecting base's lists map after the cut (which reads its host page ids):
    // both parts in one map (packed: above's lists right after below's).
    host_kv_->map_layer(l, 2 * n, x.below_table, x.below_lens, cache_, s);
    host_kv_->read_slots(l, below);
    host_kv_->read_slots(l, above, n);
  }
  const MacMergePushArgs push{.merge = {.batch = n, .num_heads = c.num_heads, .head_dim = c.head_dim,
                                        .below_o = x.below_o, .below_lse = x.below_lse, .above_o = x.above_o,
                                        .above_lse = x.above_lse, .out = o_.data()},
                              .out_lse = lse_.data(), .out_bf16 = o16_from_attention(), .hit_entry = x.hit_entry,
                              .row_slot = row_slot, .positions = inputs_.data() + in.positions, .q_pre = q_pre_.data(),
                              .row_policy = row_policy, .rules = plan.mac_rules, .rings = rings};
  if (one_call) {
    // Rows [0, n) below, [n, 2n) above with the same queries, the keys split as the n rows'
    // alone (split_rows): each part's states as two calls made them, one split and one merge
    // launch a layer fewer (a miss cost about 17 us a layer over dense in these, H200 2026-11-26).
    // Where the call splits, its chunk merge also merges and pushes (mac_merge_push's two
    // launches fewer).
    PagedDecodeArgs both = below;
    both.batch = 2 * n;
    both.q_rows = n;
    both.split_rows = n;
    both.short_pages = plan.mac_above_pages;  // `above`: a band and a tail, few CTAs (all rows MAC's)
    check(paged_decode_attention(both, push, s), "paged_decode_attention (MAC, below and above the prefix end)");
    return;
  }
  // Some row runs ART. mac+art rows stop in `below` (listed in ART's order, its heads without
  // a page there given) and read `above` whole; other ART rows pass through whole into
  // `above`, in their visiting order; MAC rows without ART read both whole.
  if (plan.mac_art)
    run_art(below, plan, s, plan.art_rules, x.below_listed);
  else
    check(paged_decode_attention(below, s), "paged_decode_attention (MAC, below the prefix end)");
  run_art(above, plan, s, plan.art_rules_above);
  check(mac_merge_push(push, s), "mac_merge_push");
}

// A prefill chunk's rows [pass_.mac_first, n) become ring entries: each row's state over its
// prefix, the pages [0, mac_prefix_end(pos)) (whole pages: the decode kernel over its own
// table cut short), pushed with its pre-RoPE query.
void GpuForward::fill_mac_rings(int l, int n, cudaStream_t s) {
  const ModelConfig& c = w_.config;
  const InputLayout in(opt_.max_rows);
  const int first = pass_.mac_first, rows = n - first, maxp = opt_.max_pages_per_seq;
  if (rows <= 0) return;
  const MacState::Scratch x = mac_.scratch();
  const int32_t* positions = inputs_.data() + in.positions + first;
  check(mac_prefix_lens(positions, rows, pass_.mac_band, cache_.shape().page_size, x.prefix_lens, s),
        "mac_prefix_lens");
  const size_t q_at = size_t(first) * c.q_dim();
  const PagedDecodeArgs a{.batch = rows, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads,
                          .head_dim = c.head_dim, .max_pages_per_seq = maxp, .max_seq_len = pass_.max_seq_len,
                          .scale = 1.0f / std::sqrt(float(c.head_dim)), .q = q_.data() + q_at,
                          .k_pool = cache_.k(l), .v_pool = cache_.v(l),
                          .page_table = inputs_.data() + in.table + size_t(first) * maxp, .seq_lens = x.prefix_lens,
                          .o = x.below_o, .lse = x.below_lse, .workspace = attn_workspace_.data(),
                          .workspace_bytes = attn_workspace_.bytes()};
  check(paged_decode_attention(a, s), "paged_decode_attention (MAC prefix states)");
  check(mac_merge_push({.merge = {.batch = rows, .num_heads = c.num_heads, .head_dim = c.head_dim,
                                  .below_o = x.below_o, .below_lse = x.below_lse},
                        .row_slot = inputs_.data() + in.mac_slot + first, .positions = positions,
                        .q_pre = q_pre_.data() + q_at, .row_policy = inputs_.data() + in.policy + first,
                        .rules = planner_->mac_rules_device(), .rings = mac_.rings(l)},
                       s),
        "mac_merge_push (prompt rows)");
}

}  // namespace skim::cuda
