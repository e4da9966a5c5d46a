#include "attention/pipeline.h"

#include <algorithm>
#include <unordered_map>

#include "attention/selectors.h"
#include "backend/cpu/causal_attend.h"
#include "backend/cpu/page_digest.h"
#include "backend/cpu/paged_decode_attention.h"
#include "backend/cpu/split_attend.h"
#include "backend/cpu/token_decode_attention.h"

namespace skim {

namespace {

// Keys in the union of the heads' selections: what a GQA-aware kernel reads once.
uint64_t union_size(const Selection& s) {
  std::vector<KeyRange> all;
  for (auto& h : s.heads) all.insert(all.end(), h.begin(), h.end());
  uint64_t n = 0;
  for (KeyRange r : coalesce_ranges(std::move(all))) n += uint64_t(r.end - r.begin);
  return n;
}

}  // namespace

void attend_dense(const AttentionBatch& b, float* out) {
  const int group = b.num_heads / b.num_kv_heads;
  std::vector<AttendTask> tasks;
  for (int r = 0; r < b.num_rows; ++r)
    for (int h = 0; h < b.num_kv_heads; ++h)
      tasks.push_back({r, h, h * group, group, {KeyRange{0, b.positions[r] + 1}}});
  AttentionBatch copy = b;
  copy.out = out;
  attend_tasks(copy.rows(), tasks);
}

PipelinePolicy::PipelinePolicy(PipelineConfig config)
    : config_(std::move(config)), dense_(std::make_unique<DenseSelector>()) {}

void attend_prefill(const AttentionBatch& b, const PrefixStates* prefix) {
  constexpr int kRowsPerTask = 32;  // small enough to balance the causal triangle over threads
  const int group = b.num_heads / b.num_kv_heads, d = b.head_dim;
  struct Task {
    int row, rows, kv_head;
  };
  std::vector<Task> tasks;
  for (int r = 0; r < b.num_rows;) {
    int e = r + 1;  // extend while the rows continue the same sequence position by position
    while (e < b.num_rows && e - r < kRowsPerTask && b.tables[e] == b.tables[r] &&
           b.positions[e] == b.positions[e - 1] + 1)
      ++e;
    for (int h = 0; h < b.num_kv_heads; ++h) tasks.push_back({r, e - r, h});
    r = e;
  }
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    CausalRun run;
    size_t offset = size_t(t.row) * b.num_heads * d + size_t(t.kv_head) * group * d;
    run.q = b.q + offset;
    run.out = b.out + offset;
    run.row_stride = b.num_heads * d;
    run.rows = t.rows;
    run.group = group;
    run.first_pos = b.positions[t.row];
    if (prefix) {
      run.prefix_band = prefix->band;
      run.prefix_page = b.kv.page_size;
      run.prefix_o = prefix->o + offset;
      run.prefix_lse = prefix->lse + size_t(t.row) * b.num_heads + size_t(t.kv_head) * group;
      run.lse_stride = b.num_heads;
    }
    attend_causal(run, SeqKV{b.kv, b.tables[t.row]->pages.data(), t.kv_head}, b.scale);
  }
}

void PipelinePolicy::attend_plan(const AttentionBatch& b, const PagePlan& plan, bool sparse) {
  const PagedDecodeArgsF32 a{.batch = b.num_rows, .num_heads = b.num_heads, .num_kv_heads = b.num_kv_heads,
                             .head_dim = b.head_dim, .page_size = b.kv.page_size, .max_pages_per_seq = plan.max_pages,
                             .scale = b.scale, .tables_per_kv_head = plan.per_kv_head, .q = b.q, .k_pool = b.kv.k,
                             .v_pool = b.kv.v, .page_table = plan.table.data(), .seq_lens = plan.lens.data(),
                             .head_masks = plan.head_masks.empty() ? nullptr : plan.head_masks.data(),
                             .o = b.out};
  cpu::paged_decode_attention(a);

  uint64_t keys = 0, context = 0;
  for (int32_t n : plan.lens) keys += uint64_t(n) * (plan.per_kv_head ? 1 : b.num_kv_heads);
  for (int r = 0; r < b.num_rows; ++r) context += uint64_t(b.positions[r] + 1) * b.num_kv_heads;
  stats_.add_decode_call(keys, plan.metadata_bytes, uint64_t(b.num_rows), context);
  if (sparse && has_selection_observer()) notify_plan(b, plan);
}

// The plan's lists as key positions, for the selection observer: each list holds pages of its
// row's table, in any order; a masked list gives each query head its own pages.
void PipelinePolicy::notify_plan(const AttentionBatch& b, const PagePlan& plan) const {
  for_each_plan_selection(b, plan, [&](int r, int h, const std::vector<std::vector<KeyRange>>& heads) {
    notify_selection(b, r, h, heads);
  });
}

void for_each_plan_selection(const AttentionBatch& b, const PagePlan& plan,
                             const std::function<void(int, int, const std::vector<std::vector<KeyRange>>&)>& f,
                             const std::vector<bool>* rows) {
  const int ps = b.kv.page_size, group = b.num_heads / b.num_kv_heads;
  const int units = plan.head_masks.empty() ? 1 : group;
  for (int r = 0; r < b.num_rows; ++r) {
    if (rows && !(*rows)[size_t(r)]) continue;
    const std::vector<int32_t>& pages = b.tables[r]->pages;
    std::unordered_map<int32_t, int> place;  // page id -> its place in the row (lists come in any order)
    for (size_t j = 0; j < pages.size(); ++j) place.emplace(pages[j], int(j));
    for (int h = 0; h < b.num_kv_heads; ++h) {
      const int list = plan.per_kv_head ? r * b.num_kv_heads + h : r;
      const int n = (plan.lens[size_t(list)] + ps - 1) / ps;
      std::vector<std::vector<int>> indices(static_cast<size_t>(units));
      for (int i = 0; i < n; ++i) {
        const int j = place.at(plan.list(list)[i]);
        for (int g = 0; g < units; ++g)
          if (units == 1 || (plan.head_masks[size_t(list) * plan.max_pages + i] >> g & 1u))
            indices[size_t(g)].push_back(j);
      }
      for (std::vector<int>& idx : indices) std::sort(idx.begin(), idx.end());
      std::vector<std::vector<KeyRange>> heads;
      for (const std::vector<int>& idx : indices) heads.push_back(page_ranges(idx, ps, b.positions[r] + 1));
      f(r, h, heads);
    }
  }
}

void PipelinePolicy::forget(const PageTable* table) {
  if (config_.selector) config_.selector->forget(table);
  if (config_.mac) config_.mac->forget(table);
}

std::map<std::string, double> PipelinePolicy::counters() const {
  std::map<std::string, double> c = config_.selector ? config_.selector->counters() : std::map<std::string, double>{};
  if (config_.mac) config_.mac->add_counters(c);
  art_stats_.add_counters(c);
  return c;
}

// A page selector's plan over the guessed queries, as the selection observer would see it.
void PipelinePolicy::speculate(const AttentionBatch& b) {
  if (!b.decode || !config_.selector || b.layer < config_.dense_layers) return;
  PagePlan plan;
  if (!config_.selector->plan(b, plan)) return;  // a per-token selector: no page plan to guess
  for_each_plan_selection(b, plan, [&](int r, int h, const std::vector<std::vector<KeyRange>>& heads) {
    notify_speculation(b, r, h, heads);
  });
}

void PipelinePolicy::attend(const AttentionBatch& b) {
  if (config_.selector) config_.selector->observe(b);
  if (!b.decode) {  // prefill is dense for every policy
    if (config_.mac) {  // the prompt's last K tokens fill the rings, their states from this pass
      std::vector<float> prefix_o(size_t(b.num_rows) * b.num_heads * b.head_dim), prefix_lse(size_t(b.num_rows) * b.num_heads);
      PrefixStates prefix{config_.mac->params().band, prefix_o.data(), prefix_lse.data()};
      attend_prefill(b, &prefix);
      config_.mac->observe_prefill(b, prefix_o.data(), prefix_lse.data());
    } else {
      attend_prefill(b);
    }
    uint64_t keys = 0;
    for (int r = 0; r < b.num_rows; ++r) keys += uint64_t(b.positions[r] + 1) * b.num_kv_heads;
    stats_.keys_read += keys;
    notify(b);
    return;
  }
  const bool sparse = b.decode && config_.selector && b.layer >= config_.dense_layers;
  Selector& selector = sparse ? *config_.selector : *dense_;
  // ART traverses where the base's own selection applies (or everywhere for a dense base); the
  // layers a sparse selector keeps dense stay exact.
  const bool art = config_.art && (sparse || !config_.selector);
  // mac+art on the group rule (art:stop=group): ART's kernel over MAC's part below each row's
  // prefix end, in the base's visiting order (pipeline_mac.cpp).
  const bool art_below = art && config_.mac && config_.art->group_stop;
  if (config_.mac && (!art || art_below)) {  // plan + kernel, as on the GPU
    if (art_below) {  // MAC cuts the plan in position order; ART visits `below` in the visiting one
      SKIM_REQUIRE(selector.plan(b, plan_) && selector.plan_visiting(b, visiting_),
                   "policy {}: art:stop=group needs an order per GQA group", config_.spec);
      attend_mac_plan(b, plan_, sparse, &visiting_);
    } else if (selector.plan(b, plan_)) {
      attend_mac_plan(b, plan_, sparse);
    } else {
      attend_mac_tokens(b, selector, sparse);
    }
    notify(b);
    return;
  }
  if (art) {  // ART's traversal, per GQA group (plan + kernel) or per head
    if (config_.art->group_stop)
      attend_art_group(b, selector, sparse);
    else
      attend_heads(b, selector, sparse);
    notify(b);
    return;
  }
  if (selector.plan(b, plan_)) {  // plan + kernel: what the GPU runs too
    attend_plan(b, plan_, sparse);
    notify(b);
    return;
  }
  attend_tokens(b, selector, sparse);  // a per-token selection (cs, oracle): its token plan
  notify(b);
}

// The selector's choice per (row, KV head) as a token plan: one list per (row, KV head) when
// every selection is shared by its group, else one per query head (a shared selection copied to
// each of its heads); each list ascending.
void PipelinePolicy::plan_tokens(const AttentionBatch& b, Selector& selector, bool sparse, DecodeCounts& counts) {
  const int group = b.num_heads / b.num_kv_heads;
  std::vector<Selection>& sels = selections_;
  sels.resize(size_t(b.num_rows) * b.num_kv_heads);
  bool per_head = false;
  int max_tokens = 0;
  for (int r = 0; r < b.num_rows; ++r) {
    const int ctx = b.positions[r] + 1;
    for (int h = 0; h < b.num_kv_heads; ++h) {
      Selection& sel = sels[size_t(r) * b.num_kv_heads + h];
      sel.heads.clear();
      sel.metadata_bytes = 0;
      selector.select(SelectInput{b, r, h, ctx, false}, sel);  // the kernel wants positions: order is free
      if (sparse) notify_selection(b, r, h, sel.heads);
      per_head |= !sel.shared();
      counts.keys += union_size(sel);
      counts.metadata += sel.metadata_bytes;
      counts.context += uint64_t(ctx);
      max_tokens = std::max(max_tokens, ctx);
    }
  }
  tokens_.reset(per_head, b.num_rows * (per_head ? b.num_heads : b.num_kv_heads), max_tokens);
  for (int r = 0; r < b.num_rows; ++r)
    for (int h = 0; h < b.num_kv_heads; ++h) {
      const Selection& sel = sels[size_t(r) * b.num_kv_heads + h];
      for (int g = 0; g < (per_head ? group : 1); ++g) {
        const int list = per_head ? r * b.num_heads + h * group + g : r * b.num_kv_heads + h;
        int32_t* out = tokens_.list(list);
        int n = 0;
        for (KeyRange k : coalesce_ranges(sel.heads[sel.shared() ? 0 : size_t(g)]))
          for (int t = k.begin; t < k.end; ++t) out[n++] = t;
        tokens_.lens[size_t(list)] = n;
      }
    }
}

int PipelinePolicy::flatten_row_pages(const AttentionBatch& b) {
  int max_pages = 0;
  for (int r = 0; r < b.num_rows; ++r) max_pages = std::max(max_pages, int(b.tables[r]->pages.size()));
  row_pages_.assign(size_t(b.num_rows) * max_pages, 0);
  row_lens_.resize(size_t(b.num_rows));
  for (int r = 0; r < b.num_rows; ++r) {
    std::copy(b.tables[r]->pages.begin(), b.tables[r]->pages.end(), row_pages_.begin() + std::ptrdiff_t(r) * max_pages);
    row_lens_[size_t(r)] = b.positions[r] + 1;
  }
  return max_pages;
}

PagedDecodeArgsF32 PipelinePolicy::row_pages_args(const AttentionBatch& b, int max_pages, float* o, float* lse) const {
  return {.batch = b.num_rows, .num_heads = b.num_heads, .num_kv_heads = b.num_kv_heads, .head_dim = b.head_dim,
          .page_size = b.kv.page_size, .max_pages_per_seq = max_pages, .scale = b.scale, .q = b.q, .k_pool = b.kv.k,
          .v_pool = b.kv.v, .page_table = row_pages_.data(), .seq_lens = row_lens_.data(), .o = o, .lse = lse};
}

void PipelinePolicy::attend_tokens(const AttentionBatch& b, Selector& selector, bool sparse) {
  DecodeCounts counts;
  plan_tokens(b, selector, sparse, counts);
  const int max_pages = flatten_row_pages(b);
  const TokenDecodeArgsF32 a{.attn = row_pages_args(b, max_pages, b.out), .max_tokens = tokens_.max_tokens,
                             .lists_per_query_head = tokens_.per_query_head, .token_lists = tokens_.table.data(),
                             .token_lens = tokens_.lens.data()};
  cpu::token_decode_attention(a);
  stats_.add_decode_call(counts.keys, counts.metadata, uint64_t(b.num_rows), counts.context);
}

}  // namespace skim
