#include "attention/retro.h"

#include <algorithm>
#include <bit>

#include "attention/attention_state.h"
#include "attention/selectors.h"
#include "backend/cpu/paged_decode_attention.h"
#include "backend/cpu/retro_decode.h"
#include "core/error.h"
#include "attention/policy_registry.h"

namespace skim {

RetroPolicy::RetroPolicy(PipelineConfig config, int window) : config_(std::move(config)), window_(window) {
  SKIM_REQUIRE(config_.selector != nullptr, "policy '{}': retro needs a page selector", config_.spec);
}

EngineCorrections RetroPolicy::corrections() const {
  EngineCorrections c = config_.corrections;
  c.retro_window = window_;
  return c;
}

int RetroPolicy::slot_of(const PageTable* t) {
  auto it = slots_of_.find(t);
  if (it != slots_of_.end()) return it->second;
  int slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = slots_++;
  }
  slots_of_[t] = slot;
  const int w1 = window_ - 1;
  for (Layer& l : layers_) {  // a fresh slot: nothing loaded, nothing cached
    const size_t a = size_t(slot + 1) * units_ * stride_, c = size_t(slot + 1) * w1;
    if (l.a.size() < a) l.a.resize(a, kRetroNever);
    if (l.step.size() < c) {
      l.step.resize(c, kRetroNever);
      l.o.resize(c * heads_ * head_dim_, 0.0f);
      l.lse.resize(c * heads_, kEmptyLse);
    }
    std::fill_n(l.a.begin() + std::ptrdiff_t(size_t(slot) * units_ * stride_), size_t(units_) * stride_, kRetroNever);
    std::fill_n(l.step.begin() + std::ptrdiff_t(size_t(slot) * w1), w1, kRetroNever);
  }
  return slot;
}

// The layer's arrays for every slot, with a stride that holds every row's pages (a wider one
// copies the masks over).
void RetroPolicy::reserve(const AttentionBatch& b) {
  const int group = b.num_heads / b.num_kv_heads;
  if (heads_ == 0) {
    heads_ = b.num_heads;
    head_dim_ = b.head_dim;
    units_ = b.num_heads;  // per query head (quest); gbsa uses the first num_kv_heads of them
    (void)group;
  }
  int pages = 0;
  for (int r = 0; r < b.num_rows; ++r) pages = std::max(pages, b.positions[r] / b.kv.page_size + 1);
  if (pages > stride_) {
    const int wider = std::max(pages, 2 * stride_);
    for (Layer& l : layers_) {
      std::vector<int32_t> a(size_t(slots_) * units_ * wider, kRetroNever);
      for (size_t row = 0; row < size_t(slots_) * units_; ++row)
        std::copy_n(l.a.begin() + std::ptrdiff_t(row * stride_), stride_, a.begin() + std::ptrdiff_t(row * wider));
      l.a = std::move(a);
    }
    stride_ = wider;
  }
  if (layers_.size() <= size_t(b.layer)) {
    const size_t first = layers_.size();
    layers_.resize(size_t(b.layer) + 1);
    const int w1 = window_ - 1;
    for (size_t l = first; l < layers_.size(); ++l) {
      layers_[l].a.assign(size_t(slots_) * units_ * stride_, kRetroNever);
      layers_[l].step.assign(size_t(slots_) * w1, kRetroNever);
      layers_[l].o.assign(size_t(slots_) * w1 * heads_ * head_dim_, 0.0f);
      layers_[l].lse.assign(size_t(slots_) * w1 * heads_, kEmptyLse);
    }
  }
}

void RetroPolicy::fork(const PageTable* from, const PageTable* to) {
  config_.selector->fork(from, to);
  auto it = slots_of_.find(from);
  if (it == slots_of_.end()) return;
  const int src = it->second, dst = slot_of(to);
  const size_t w1 = size_t(window_ - 1), a = size_t(units_) * stride_, c = w1 * heads_;
  for (Layer& l : layers_) {
    std::copy_n(l.a.begin() + std::ptrdiff_t(src * a), a, l.a.begin() + std::ptrdiff_t(dst * a));
    std::copy_n(l.step.begin() + std::ptrdiff_t(src * w1), w1, l.step.begin() + std::ptrdiff_t(dst * w1));
    std::copy_n(l.lse.begin() + std::ptrdiff_t(src * c), c, l.lse.begin() + std::ptrdiff_t(dst * c));
    std::copy_n(l.o.begin() + std::ptrdiff_t(src * c * head_dim_), c * head_dim_,
                l.o.begin() + std::ptrdiff_t(dst * c * head_dim_));
  }
}

void RetroPolicy::forget(const PageTable* table) {
  config_.selector->forget(table);
  auto it = slots_of_.find(table);
  if (it == slots_of_.end()) return;
  free_.push_back(it->second);
  slots_of_.erase(it);
}

std::map<std::string, double> RetroPolicy::counters() const {
  std::map<std::string, double> c = config_.selector->counters();
  if (own_keys_ > 0) c["retro_budget_growth"] = double(own_keys_ + supplement_keys_) / double(own_keys_);
  if (newest_rows_ > 0) c["retro_extra_rows_per_step"] = double(past_rows_) / double(newest_rows_);
  return c;
}

void RetroPolicy::attend(const AttentionBatch& b) {
  config_.selector->observe(b);
  if (!b.decode) {  // prefill is dense
    attend_prefill(b);
    for (int r = 0; r < b.num_rows; ++r) stats_.keys_read += uint64_t(b.positions[r] + 1) * b.num_kv_heads;
    notify(b);
    return;
  }
  attend_decode(b);
  notify(b);
}

// The batch's newest rows alone, for the base's plan (its selection is theirs).
AttentionBatch RetroPolicy::NewestRows::view(const AttentionBatch& b) {
  const size_t width = size_t(b.num_heads) * b.head_dim;
  positions.clear();
  tables.clear();
  q.resize(rows.size() * width);
  q_pre.resize(b.q_pre ? rows.size() * width : 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int r = rows[i];
    positions.push_back(b.positions[r]);
    tables.push_back(b.tables[r]);
    std::copy_n(b.q + size_t(r) * width, width, q.data() + i * width);
    if (b.q_pre) std::copy_n(b.q_pre + size_t(r) * width, width, q_pre.data() + i * width);
  }
  AttentionBatch v = b;
  v.num_rows = int(rows.size());
  v.positions = positions.data();
  v.tables = tables.data();
  v.q = q.data();
  v.q_pre = b.q_pre ? q_pre.data() : nullptr;
  v.out = nullptr;
  v.retro_step = nullptr;
  return v;
}

void RetroPolicy::attend_decode(const AttentionBatch& b) {
  SKIM_REQUIRE(b.retro_step != nullptr, "policy '{}': a decode batch without retro steps (run it through the engine)",
               config_.spec);
  const int group = b.num_heads / b.num_kv_heads, d = b.head_dim, ps = b.kv.page_size, n = b.num_rows;
  const bool sparse = b.layer >= config_.dense_layers;

  // Each row's sequence slot, and its sequence's newest row (the largest step).
  reserve(b);
  row_slot_.resize(size_t(n));
  newest_.resize(size_t(n));
  std::unordered_map<const PageTable*, int> newest;
  for (int r = 0; r < n; ++r) {
    row_slot_[size_t(r)] = slot_of(b.tables[r]);
    auto [it, fresh] = newest.emplace(b.tables[r], r);
    if (!fresh && b.retro_step[r] > b.retro_step[it->second]) it->second = r;
  }
  for (int r = 0; r < n; ++r) {
    const int nr = newest.at(b.tables[r]);
    newest_[size_t(r)] = nr;
    SKIM_REQUIRE(r == nr || (b.retro_step[r] < b.retro_step[nr] && b.retro_step[r] > b.retro_step[nr] - window_),
                 "policy '{}': row of step {} outside the window of step {}", config_.spec, b.retro_step[r],
                 b.retro_step[nr]);
  }

  // plan: the base's lists for the newest rows (planned for them alone), the supplements for
  // the past rows.
  NewestRows& nb = newest_batch_;
  nb.rows.clear();
  nb.base_row.assign(size_t(n), -1);
  for (int r = 0; r < n; ++r)
    if (newest_[size_t(r)] == r) {
      nb.base_row[size_t(r)] = int32_t(nb.rows.size());
      nb.rows.push_back(r);
    }
  const AttentionBatch newest_only = nb.view(b);
  const bool planned = sparse ? config_.selector->plan(newest_only, base_) : DenseSelector().plan(newest_only, base_);
  SKIM_REQUIRE(planned, "policy '{}': retro needs the base's page plan (at most 32 query heads per KV head)",
               config_.spec);
  const bool per_head = !base_.head_masks.empty();
  const int lists = n * b.num_kv_heads;
  int max_pages = 0;  // the batch's longest row: the plan's stride (past rows are no longer)
  for (int r = 0; r < n; ++r) max_pages = std::max(max_pages, b.positions[r] / ps + 1);
  SKIM_REQUIRE(base_.max_pages <= max_pages, "retro: the base plan is wider than its rows");
  plan_.reset(true, lists, max_pages);
  plan_.head_masks.assign(plan_.table.size(), 0u);
  age_.resize(plan_.table.size() * size_t(group));
  Layer& L = layers_[size_t(b.layer)];
  std::vector<int32_t> lens(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) lens[size_t(r)] = b.positions[r] + 1;
  std::vector<int32_t> tables(size_t(n) * max_pages, 0);
  for (int r = 0; r < n; ++r)
    std::copy_n(b.tables[r]->pages.data(), (lens[size_t(r)] + ps - 1) / ps, tables.data() + size_t(r) * max_pages);
  std::vector<int32_t> steps(b.retro_step, b.retro_step + n);
  cpu::retro_page_plan({.batch = n, .num_heads = b.num_heads, .num_kv_heads = b.num_kv_heads, .page_size = ps,
                        .max_pages_per_seq = max_pages, .per_head_units = per_head, .sparse = sparse,
                        .page_table = tables.data(), .seq_lens = lens.data(), .base_per_kv_head = base_.per_kv_head,
                        .base_table = base_.table.data(), .base_lens = base_.lens.data(),
                        .base_masks = per_head ? base_.head_masks.data() : nullptr,
                        .base_row = nb.base_row.data(), .row_slot = row_slot_.data(),
                        .retro_step = steps.data(), .newest_row = newest_.data(),
                        .masks = {.a = L.a.data(), .units = units_, .stride = stride_}, .age = age_.data(),
                        .out_table = plan_.table.data(), .out_lens = plan_.lens.data(),
                        .out_masks = plan_.head_masks.data()});

  if (sparse && has_selection_observer())  // the newest rows' choice (the base's)
    for_each_plan_selection(newest_only, base_, [&](int r, int h, const std::vector<std::vector<KeyRange>>& heads) {
      notify_selection(b, nb.rows[size_t(r)], h, heads);
    });

  // kernel: every row's list at once; merge: outputs and the cache.
  o_.resize(size_t(n) * b.num_heads * d);
  lse_.resize(size_t(n) * b.num_heads);
  cpu::paged_decode_attention(PagedDecodeArgsF32{
      .batch = n, .num_heads = b.num_heads, .num_kv_heads = b.num_kv_heads, .head_dim = d, .page_size = ps,
      .max_pages_per_seq = plan_.max_pages, .scale = b.scale, .tables_per_kv_head = true, .q = b.q, .k_pool = b.kv.k,
      .v_pool = b.kv.v, .page_table = plan_.table.data(), .seq_lens = plan_.lens.data(),
      .head_masks = plan_.head_masks.data(), .o = o_.data(), .lse = lse_.data()});
  cpu::retro_merge({.batch = n, .num_heads = b.num_heads, .head_dim = d, .o = o_.data(), .lse = lse_.data(),
                    .out = b.out, .row_slot = row_slot_.data(), .retro_step = steps.data(), .newest_row = newest_.data(),
                    .cache = {.entries = window_ - 1, .o = L.o.data(), .lse = L.lse.data(), .step = L.step.data()}});

  // Work: per sequence the newest row's list is the union every row of it reads (a past row's
  // pages are among them), loaded once; 4 bytes of mask per selected page and unit.
  uint64_t keys = 0, meta = sparse ? base_.metadata_bytes : 0, context = 0;  // digests: the newest rows'
  for (int r = 0; r < n; ++r) {
    const bool is_newest = newest_[size_t(r)] == r;
    newest_rows_ += is_newest;
    past_rows_ += !is_newest;
    for (int h = 0; h < b.num_kv_heads; ++h) {
      const size_t list = size_t(r) * b.num_kv_heads + h;
      const int listed = (plan_.lens[list] + ps - 1) / ps;
      if (is_newest) {
        keys += uint64_t(plan_.lens[list]);
        context += uint64_t(lens[size_t(r)]);
      }
      if (!sparse) continue;
      if (is_newest) meta += uint64_t(listed) * (per_head ? group : 1) * sizeof(int32_t);
      for (int k = 0; k < listed; ++k) {  // tokens per unit: its own selection, or a supplement
        const uint32_t mask = plan_.head_masks[list * plan_.max_pages + k];
        const int units = per_head ? std::popcount(mask) : 1;
        const int tokens = std::min(ps, plan_.lens[list] - k * ps);
        (is_newest ? own_keys_ : supplement_keys_) += uint64_t(units) * uint64_t(tokens);
      }
    }
  }
  stats_.keys_read += keys;
  stats_.decode_calls += 1;
  stats_.decode_keys_read += keys;
  stats_.decode_metadata_bytes += meta;
  stats_.decode_rows += uint64_t(newest.size());
  stats_.decode_context += context;
}

PolicyInfo retro_policy_info() {
  return {.name = "retro",
          .summary = "RetroAttention: each decode step also re-runs the last w-1 tokens over the pages no query has seen since",
          .stage = PolicyStage::Correction,
          .keys = {integer_key("w", kRetroWindow, 1, 64, "the step re-runs the last w-1 tokens (w = 1 is the base policy)")},
          .composes_with = {"quest", "gbsa", "resa", "rectify"}, .requires_one_of = {"quest", "gbsa", "resa"},
          .sequence_state = true, .backends = {"cpu", "cuda"}};
}

}  // namespace skim
