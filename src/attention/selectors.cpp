#include "attention/selectors.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "attention/group_page_select_args.h"
#include "backend/cpu/group_page_select.h"
#include "backend/cpu/quest_page_select.h"
#include "backend/cpu/page_digest.h"
#include "backend/cpu/window_page_plan.h"
#include "attention/policy_registry.h"

namespace skim {

namespace {

// Pages of the longest row: a plan's row stride.
int max_pages_of(const AttentionBatch& b) {
  int n = 0;
  for (int r = 0; r < b.num_rows; ++r) n = std::max(n, b.positions[r] / b.kv.page_size + 1);
  return n;
}

// Digest bytes (fp32 min and max) a selection reads for one (row, KV head) of `context` keys.
uint64_t digest_bytes(const AttentionBatch& b, int context) {
  return uint64_t((context + b.kv.page_size - 1) / b.kv.page_size) * 2 * b.head_dim * sizeof(float);
}

// Those of every (row, KV head) of a batch whose rows' contexts are `lens`.
uint64_t digest_bytes(const AttentionBatch& b, const std::vector<int32_t>& lens) {
  uint64_t n = 0;
  for (int32_t ctx : lens) n += digest_bytes(b, ctx) * b.num_kv_heads;
  return n;
}

}  // namespace

void DenseSelector::select(const SelectInput& in, Selection& out) {
  out.heads.assign(1, {KeyRange{0, in.context}});
}

void StreamingSelector::select(const SelectInput& in, Selection& out) {
  // Whole pages, as the plan; the recent window first (it carries most of the mass), then the
  // sinks.
  const int ps = in.batch.kv.page_size;
  const WindowPages w = window_pages(in.context, ps, p_.sink, p_.window);
  out.heads.assign(1, {KeyRange{w.first * ps, in.context}});
  if (w.sinks > 0) out.heads[0].push_back({0, w.sinks * ps});
}

bool StreamingSelector::plan(const AttentionBatch& b, PagePlan& plan) {
  DenseSelector().plan(b, rows_);  // the rows' own tables in the plan's layout: the input
  plan.reset(false, b.num_rows, rows_.max_pages);  // one list per row, shared by its KV heads
  cpu::window_page_plan({.batch = b.num_rows, .num_kv_heads = 1, .page_size = b.kv.page_size,
                         .max_pages_per_seq = rows_.max_pages, .sink = p_.sink, .window = p_.window,
                         .page_table = rows_.table.data(), .seq_lens = rows_.lens.data(),
                         .out_table = plan.table.data(), .out_lens = plan.lens.data()});
  return true;
}

bool StreamingSelector::plan_visiting(const AttentionBatch& b, PagePlan& plan) {
  DenseSelector().plan(b, rows_);
  plan.reset(false, b.num_rows, rows_.max_pages);
  cpu::window_page_plan({.batch = b.num_rows, .num_kv_heads = 1, .page_size = b.kv.page_size,
                         .max_pages_per_seq = rows_.max_pages, .sink = p_.sink, .window = p_.window,
                         .recent_first = true, .page_table = rows_.table.data(), .seq_lens = rows_.lens.data(),
                         .out_table = plan.table.data(), .out_lens = plan.lens.data()});
  return true;
}

namespace {

// Quest's selection for `rows` rows of the batch from `first_row`, whose page tables are the
// rows of `tables` (stride max_pages) and whose contexts are `lens`.
QuestPageSelectArgsF32 quest_select_args(const AttentionBatch& b, const QuestParams& p, int first_row, int rows,
                                         const int32_t* tables, int max_pages, const int32_t* lens) {
  return {.batch = rows, .num_heads = b.num_heads, .num_kv_heads = b.num_kv_heads, .head_dim = b.head_dim,
          .page_size = b.kv.page_size, .max_pages_per_seq = max_pages, .budget = p.budget,
          .min_tokens = p.min_tokens, .q = b.q + size_t(first_row) * b.num_heads * b.head_dim,
          .kmin = b.kv.kmin, .kmax = b.kv.kmax, .page_table = tables, .seq_lens = lens};
}

}  // namespace

void QuestSelector::select(const SelectInput& in, Selection& out) {
  const AttentionBatch& b = in.batch;
  const int ps = b.kv.page_size, group = b.num_heads / b.num_kv_heads;
  const std::vector<int32_t>& pages = b.tables[in.row]->pages;
  const QuestPageSelectArgsF32 a =
      quest_select_args(b, p_, in.row, 1, pages.data(), int(pages.size()), &in.context);
  out.heads.assign(size_t(group), {});
  for (int g = 0; g < group; ++g)
    out.heads[size_t(g)] = page_ranges(cpu::quest_head_pages(a, 0, in.kv_head * group + g), ps, in.context);
  out.metadata_bytes = digest_bytes(b, in.context);
}

bool QuestSelector::plan(const AttentionBatch& b, PagePlan& plan) { return plan_union(b, plan, false); }
bool QuestSelector::plan_visiting(const AttentionBatch& b, PagePlan& plan) { return plan_union(b, plan, true); }

bool QuestSelector::plan_union(const AttentionBatch& b, PagePlan& plan, bool by_score) {
  if (b.num_heads / b.num_kv_heads > 32) return false;  // a mask holds 32 heads: select() per head
  DenseSelector().plan(b, rows_);  // the rows' own tables in the plan's layout: the input
  plan.reset(true, b.num_rows * b.num_kv_heads, rows_.max_pages);
  plan.head_masks.assign(plan.table.size(), 0u);
  QuestPageSelectArgsF32 a =
      quest_select_args(b, p_, 0, b.num_rows, rows_.table.data(), rows_.max_pages, rows_.lens.data());
  a.by_score = by_score;
  a.out_table = plan.table.data();
  a.out_masks = plan.head_masks.data();
  a.out_lens = plan.lens.data();
  cpu::quest_page_select(a);
  plan.metadata_bytes = digest_bytes(b, rows_.lens);
  return true;
}

void OracleSelector::select(const SelectInput& in, Selection& out) {
  const AttentionBatch& b = in.batch;
  const int d = b.head_dim, group = b.num_heads / b.num_kv_heads;
  const int n = std::max(1, quest_budget_tokens(p_.budget, p_.min_tokens, in.context));
  const SeqKV kv{b.kv, b.tables[in.row]->pages.data(), in.kv_head};
  std::vector<float> scores(static_cast<size_t>(in.context));
  std::vector<int> order(static_cast<size_t>(in.context));
  out.heads.assign(size_t(group), {});
  for (int h = 0; h < group; ++h) {
    const float* q = b.q + (size_t(in.row) * b.num_heads + size_t(in.kv_head) * group + h) * d;
    for (int t = 0; t < in.context; ++t) {
      const float* k = kv.key(t);
      float s = 0;
      for (int i = 0; i < d; ++i) s += q[i] * k[i];
      scores[size_t(t)] = s;
      order[size_t(t)] = t;
    }
    // The n best in descending score order (the order a traversal follows).
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int x, int y) { return scores[size_t(x)] > scores[size_t(y)] || (scores[size_t(x)] == scores[size_t(y)] && x < y); });
    for (int i = 0; i < n; ++i) out.heads[size_t(h)].push_back({order[size_t(i)], order[size_t(i)] + 1});
  }
  out.metadata_bytes = 0;  // counted as the keys it attends: the envelope, not a method's cost
}

namespace {

// The selection's arguments for `rows` rows of the batch from `first_row`, whose page tables
// are the rows of `tables` (stride max_pages) and whose key counts are `lens`.
GroupPageSelectArgsF32 group_select_args(const AttentionBatch& b, const GroupBlockParams& p, int first_row,
                                         int rows, const int32_t* tables, int max_pages, const int32_t* lens) {
  return {.batch = rows, .num_heads = b.num_heads, .num_kv_heads = b.num_kv_heads, .head_dim = b.head_dim,
          .page_size = b.kv.page_size, .max_pages_per_seq = max_pages, .keep = p.keep, .n_min = p.n_min,
          .n_local = p.n_local, .q = b.q + size_t(first_row) * b.num_heads * b.head_dim, .kmin = b.kv.kmin,
          .kmax = b.kv.kmax, .page_table = tables, .seq_lens = lens};
}

// ReSA's group selection over the rows' own tables (`rows`, filled here as its input):
// cpu::group_page_select's lists into `plan`, by_score in visiting order.
bool plan_group_pages(const AttentionBatch& b, const GroupBlockParams& p, bool by_score, PagePlan& rows,
                      PagePlan& plan) {
  DenseSelector().plan(b, rows);
  plan.reset(true, b.num_rows * b.num_kv_heads, rows.max_pages);
  GroupPageSelectArgsF32 a =
      group_select_args(b, p, 0, b.num_rows, rows.table.data(), rows.max_pages, rows.lens.data());
  a.by_score = by_score;
  a.out_table = plan.table.data();
  a.out_lens = plan.lens.data();
  cpu::group_page_select(a);
  plan.metadata_bytes = digest_bytes(b, rows.lens);
  return true;
}

}  // namespace

bool DenseSelector::plan(const AttentionBatch& b, PagePlan& plan) {
  const int ps = b.kv.page_size;
  plan.reset(false, b.num_rows, max_pages_of(b));
  for (int r = 0; r < b.num_rows; ++r) {
    const int ctx = b.positions[r] + 1;
    std::copy_n(b.tables[r]->pages.data(), (ctx + ps - 1) / ps, plan.table.data() + size_t(r) * plan.max_pages);
    plan.lens[size_t(r)] = ctx;
  }
  return true;
}

// Every page of the rows by descending group bound (the selection at keep 1, by_score).
bool DenseSelector::plan_visiting(const AttentionBatch& b, PagePlan& out) {
  return plan_group_pages(b, GroupBlockParams{.keep = 1.0, .n_min = 1, .n_local = 1}, true, rows_, out);
}

void GroupBlockSelector::select(const SelectInput& in, Selection& out) {
  const AttentionBatch& b = in.batch;
  const std::vector<int32_t>& pages = b.tables[in.row]->pages;
  const GroupPageSelectArgsF32 a =
      group_select_args(b, p_, in.row, 1, pages.data(), int(pages.size()), &in.context);
  out.heads.assign(1, page_ranges(cpu::group_pages_by_bound(a, 0, in.kv_head), b.kv.page_size, in.context));
  out.metadata_bytes = digest_bytes(b, in.context);
}

bool GroupBlockSelector::plan(const AttentionBatch& b, PagePlan& plan) { return plan_group(b, plan, false); }
bool GroupBlockSelector::plan_visiting(const AttentionBatch& b, PagePlan& plan) { return plan_group(b, plan, true); }

bool GroupBlockSelector::plan_group(const AttentionBatch& b, PagePlan& plan, bool by_score) {
  return plan_group_pages(b, p_, by_score, rows_, plan);
}

// ---- registry entries (policy_registry.h) ----

namespace {

const std::vector<std::string> kSparseSelectors = {"streaming", "quest", "oracle", "gbsa", "resa", "cs"};

PolicyKey dense_layers_key(int fallback, const std::string& why) {
  return integer_key("dense_layers", fallback, 0, 1000000, fmt::format("the first N layers stay dense{}", why));
}

std::vector<PolicyKey> group_block_keys() {
  const GroupBlockParams g;
  return {fraction_key("keep", g.keep, "fraction of 16-token blocks kept"),
          integer_key("n_min", g.n_min, 1, kNoUpperBound, "at least this many blocks"),
          integer_key("n_local", g.n_local, 0, kNoUpperBound, "most recent blocks always kept"),
          dense_layers_key(0, " (ReSA sparsifies every layer)")};
}

PolicyKey rectify_every_key() {
  return integer_key("f", kRectifyEvery, 1, kNoUpperBound, "rectify every f generated tokens");
}

// Quest's keys; the oracle takes the same with its own defaults.
std::vector<PolicyKey> budget_keys(double budget, int min_tokens, int dense_layers, const std::string& why) {
  return {positive_key("budget", budget, "tokens per query head: a fraction of the context when <= 1, tokens when > 1"),
          integer_key("min", min_tokens, 0, kNoUpperBound, "floor of a fractional budget, in tokens"),
          dense_layers_key(dense_layers, why)};
}

}  // namespace

PolicyInfo dense_policy_info() {
  return {.name = "dense", .summary = "every key up to the current position; the reference",
          .composes_with = {"mac", "art"}, .order = "position", .backends = {"cpu", "cuda"}};
}

PolicyInfo streaming_policy_info() {
  const StreamingParams s;
  return {.name = "streaming", .summary = "attention sinks plus a recent window (StreamingLLM), in whole pages",
          .keys = {integer_key("sink", s.sink, 0, kNoUpperBound, "first tokens always attended (the pages holding them)"),
                   integer_key("window", s.window, 1, kNoUpperBound, "most recent tokens attended (the pages holding them)")},
          .composes_with = {"rectify", "mac", "art"}, .order = "sinks, then the recent window from the newest key",
          .backends = {"cpu", "cuda"}};
}

PolicyInfo quest_policy_info() {
  const QuestParams q;
  return {.name = "quest",
          .summary = "top pages per query head by the page-digest bound (Quest; RetroAttention's selector)",
          .keys = budget_keys(q.budget, q.min_tokens, kQuestDenseLayers, " (Quest's practice)"),
          .composes_with = {"rectify", "retro", "mac", "art"}, .order = "descending page bound, per query head",
          .backends = {"cpu", "cuda"}};
}

// Evaluation only; no retro (it needs pages).
PolicyInfo oracle_policy_info() {
  return {.name = "oracle",
          .summary = "evaluation only: per query head the budget keys of largest q . k, found by scoring every key",
          .keys = budget_keys(kOracleBudget, 0, 0, ""), .composes_with = {"rectify", "mac", "art"},
          .order = "descending q . k, per query head"};
}

PolicyInfo gbsa_policy_info() {
  return {.name = "gbsa",
          .summary = "group block-sparse attention: top blocks per GQA group by the bound of the group-mean query (ReSA)",
          .keys = group_block_keys(), .composes_with = {"rectify", "retro", "mac", "art"},
          .order = "descending block bound, per KV group", .backends = {"cpu", "cuda"}};
}

PolicyInfo resa_policy_info() {
  PolicyInfo p = gbsa_policy_info();
  p.name = "resa";
  p.summary = "gbsa plus rectify:f (ReSA)";
  p.keys.push_back(rectify_every_key());
  p.composes_with = {"rectify", "retro", "art"};
  return p;
}

PolicyInfo rectify_policy_info() {
  std::vector<std::string> with = kSparseSelectors;
  with.push_back("retro");
  return {.name = "rectify",
          .summary = "every f generated tokens, re-run them densely and overwrite their K/V (ReSA's rectification)",
          .stage = PolicyStage::Correction, .keys = {rectify_every_key()}, .composes_with = with,
          .requires_one_of = kSparseSelectors, .backends = {"cpu", "cuda"}};
}

}  // namespace skim
