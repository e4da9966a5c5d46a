// ART's group rule (art:stop=group, the default wherever a GQA group's heads share one order)
// as plan + kernel, what the GPU runs too: the base's visiting plan (Selector::plan_visiting:
// per (row, KV head) the pages in the base's priority, the partial page first, per-head masks
// for a per-head selection), then the ART decode kernel over it (cpu::art_decode_attention, the
// fp32 form of the CUDA kernel's reference): the group's heads read round by round and stop
// together once every one is stable `patience` times in a row, plus `lag` rounds.
#include <algorithm>

#include "attention/pipeline.h"
#include "backend/cpu/art_decode_attention.h"
#include "core/error.h"

namespace skim {

namespace {

// The plan with one list per (row, KV head): a per-row plan's list copied to each KV head.
const PagePlan& per_kv_head(const PagePlan& plan, int rows, int kv_heads, PagePlan& scratch) {
  if (plan.per_kv_head) return plan;
  scratch.reset(true, rows * kv_heads, plan.max_pages);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < kv_heads; ++h) {
      std::copy_n(plan.list(r), plan.max_pages, scratch.table.begin() + std::ptrdiff_t(r * kv_heads + h) * plan.max_pages);
      scratch.lens[size_t(r * kv_heads + h)] = plan.lens[size_t(r)];
    }
  scratch.metadata_bytes = plan.metadata_bytes;
  return scratch;
}

}  // namespace

void PipelinePolicy::attend_art_group(const AttentionBatch& b, Selector& selector, bool sparse) {
  SKIM_REQUIRE(selector.plan_visiting(b, visiting_), "policy {}: art:stop=group needs an order per GQA group",
               config_.spec);
  const PagePlan& plan = per_kv_head(visiting_, b.num_rows, b.num_kv_heads, visiting_lists_);
  const uint64_t keys = run_art_kernel(b, plan, b.out, nullptr);
  uint64_t context = 0;
  for (int r = 0; r < b.num_rows; ++r) context += uint64_t(b.positions[r] + 1) * b.num_kv_heads;
  stats_.add_decode_call(keys, plan.metadata_bytes, uint64_t(b.num_rows), context);
  if (sparse && has_selection_observer()) notify_plan(b, visiting_);
}

uint64_t PipelinePolicy::run_art_kernel(const AttentionBatch& b, const PagePlan& plan, float* o, float* lse) {
  const ArtParams& p = *config_.art;
  const int ps = b.kv.page_size, block_pages = std::max(1, p.block / ps), lists = plan.lists();
  art_reads_.assign(size_t(lists), 0);
  cpu::art_decode_attention(ArtDecodeArgsF32{
      .attn = {.batch = b.num_rows, .num_heads = b.num_heads, .num_kv_heads = b.num_kv_heads, .head_dim = b.head_dim,
               .page_size = ps, .max_pages_per_seq = plan.max_pages, .scale = b.scale, .tables_per_kv_head = true,
               .q = b.q, .k_pool = b.kv.k, .v_pool = b.kv.v, .page_table = plan.table.data(),
               .seq_lens = plan.lens.data(), .head_masks = plan.head_masks.empty() ? nullptr : plan.head_masks.data(),
               .o = o, .lse = lse},
      .art = {.round_pages = std::max(1, p.round) * block_pages, .lag_rounds = p.lag, .patience = p.patience,
              .eps_scale = float(p.eps_scale), .eps_dir = float(p.eps_dir), .full_test = !p.probe_test,
              .block_pages = block_pages},
      .list_pages_read = art_reads_.data()});

  // Counters per query head, in blocks (the GPU kernel's 4 pages; art:block on the CPU); the
  // keys read per (row, KV head): the tokens of the pages read, the partial page first.
  const int group = b.num_heads / b.num_kv_heads;
  uint64_t keys = 0;
  for (int i = 0; i < lists; ++i) {
    const int len = plan.lens[size_t(i)], n = (len + ps - 1) / ps, read = art_reads_[size_t(i)];
    if (read > 0) keys += uint64_t(read) * ps - uint64_t(n * ps - len);
    if (n == 0) continue;  // nothing to traverse (MAC's below part of a row at its start)
    ArtResult r;
    r.blocks = (n + block_pages - 1) / block_pages;
    r.visited = (read + block_pages - 1) / block_pages;
    r.stopped = r.visited < r.blocks;
    r.full_stop = r.stopped ? r.visited - 1 : -1;
    for (int g = 0; g < group; ++g) art_stats_.add(r);
  }
  return keys;
}

}  // namespace skim
