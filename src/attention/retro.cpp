#include "attention/retro.h"

#include <algorithm>

#include "backend/cpu/attention_state.h"
#include "attention/selectors.h"
#include "backend/cpu/split_attend.h"
#include "core/error.h"
#include "attention/policy_registry.h"

namespace skim {

namespace {

// Page indices covered by a unit's ranges, in selection order, each once.
std::vector<int> pages_of(const std::vector<KeyRange>& ranges, int page_size, std::vector<uint8_t>& seen) {
  std::vector<int> pages;
  for (KeyRange r : ranges) {
    if (r.end <= r.begin) continue;
    for (int p = r.begin / page_size; p <= (r.end - 1) / page_size; ++p) {
      if (size_t(p) >= seen.size()) seen.resize(size_t(p) + 1, 0);
      if (!seen[size_t(p)]) {
        seen[size_t(p)] = 1;
        pages.push_back(p);
      }
    }
  }
  for (int p : pages) seen[size_t(p)] = 0;
  return pages;
}

uint64_t count_keys(const std::vector<KeyRange>& r) {
  uint64_t n = 0;
  for (KeyRange x : r) n += uint64_t(std::max(0, x.end - x.begin));
  return n;
}

}  // namespace

RetroPolicy::RetroPolicy(PipelineConfig config, int window) : config_(std::move(config)), window_(window) {
  SKIM_REQUIRE(config_.selector != nullptr, "policy '{}': retro needs a page selector", config_.spec);
}

EngineCorrections RetroPolicy::corrections() const {
  EngineCorrections c = config_.corrections;
  c.retro_window = window_;
  return c;
}

void RetroPolicy::fork(const PageTable* from, const PageTable* to) {
  config_.selector->fork(from, to);
  auto it = seqs_.find(from);
  if (it != seqs_.end()) seqs_[to] = it->second;
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

void RetroPolicy::attend_decode(const AttentionBatch& b) {
  SKIM_REQUIRE(b.retro_step != nullptr, "policy '{}': a decode batch without retro steps (run it through the engine)",
               config_.spec);
  const int group = b.num_heads / b.num_kv_heads, d = b.head_dim, ps = b.kv.page_size;
  const bool sparse = b.layer >= config_.dense_layers;

  // The newest row of each sequence: the one with the largest step.
  std::unordered_map<const PageTable*, int> newest;
  for (int r = 0; r < b.num_rows; ++r) {
    auto [it, fresh] = newest.emplace(b.tables[r], r);
    if (!fresh && b.retro_step[r] > b.retro_step[it->second]) it->second = r;
  }

  std::vector<AttendTask> tasks;
  std::vector<uint8_t> seen;
  std::vector<int32_t> values;
  Selection sel;
  uint64_t keys = 0, meta = 0, context = 0;
  for (auto& [table, nr] : newest) {
    SeqState& st = seqs_[table];
    if (st.layers.size() <= size_t(b.layer)) st.layers.resize(size_t(b.layer) + 1);
    LayerState& ls = st.layers[size_t(b.layer)];
    if (ls.masks.empty()) ls.masks.resize(size_t(b.num_kv_heads) * group);
    const int t = b.retro_step[nr], ctx = b.positions[nr] + 1, current_page = b.positions[nr] / ps;
    std::vector<int> past;  // this sequence's other rows
    for (int r = 0; r < b.num_rows; ++r)
      if (b.tables[r] == table && r != nr) {
        SKIM_REQUIRE(b.retro_step[r] < t && b.retro_step[r] > t - window_,
                     "policy '{}': row of step {} outside the window of step {}", config_.spec, b.retro_step[r], t);
        past.push_back(r);
      }
    past_rows_ += past.size();
    newest_rows_ += 1;
    for (int h = 0; h < b.num_kv_heads; ++h) {
      context += uint64_t(ctx);
      if (!sparse) {  // dense layer: past rows have seen every page; they keep their cached state
        tasks.push_back({nr, h, h * group, group, {KeyRange{0, ctx}}});
        keys += uint64_t(ctx);
        continue;
      }
      sel.heads.clear();
      sel.metadata_bytes = 0;
      config_.selector->select(SelectInput{b, nr, h, ctx, false}, sel);  // retro coalesces
      notify_selection(b, nr, h, sel.heads);
      meta += sel.metadata_bytes;
      const int units = int(sel.heads.size());
      std::vector<KeyRange> all;
      for (int u = 0; u < units; ++u) {
        const std::vector<KeyRange>& ranges = sel.heads[size_t(u)];
        all.insert(all.end(), ranges.begin(), ranges.end());
        std::vector<KeyRange> own = coalesce_ranges(ranges);
        own_keys_ += count_keys(own);
        const int q_first = h * group + (units == 1 ? 0 : u), q_count = units == 1 ? group : 1;
        tasks.push_back({nr, h, q_first, q_count, own});
        // Algorithm 2 on this unit's pages, then each past row's unseen pages.
        std::vector<int> pages = pages_of(ranges, ps, seen);
        ls.masks[size_t(h) * group + u].update(t, current_page, pages, values);
        meta += pages.size() * sizeof(int32_t);
        for (int r : past) {
          const int u_step = b.retro_step[r], pos = b.positions[r];
          std::vector<KeyRange> sup;
          for (size_t i = 0; i < pages.size(); ++i) {
            if (values[i] >= u_step) continue;  // seen by a query of step >= u
            KeyRange k{pages[i] * ps, std::min((pages[i] + 1) * ps, pos + 1)};  // causal for row r
            if (k.begin < k.end) sup.push_back(k);
          }
          sup = coalesce_ranges(std::move(sup));
          supplement_keys_ += count_keys(sup);
          tasks.push_back({r, h, q_first, q_count, std::move(sup)});
        }
      }
      keys += count_keys(coalesce_ranges(std::move(all)));  // the union is loaded once for all rows
    }
  }

  std::vector<float> lse(size_t(b.num_rows) * b.num_heads, kEmptyLse);
  attend_tasks(b.rows(), tasks, lse.data());

  // Merge past rows into their cached states; cache the newest rows' states.
  for (auto& [table, nr] : newest) {
    LayerState& ls = seqs_[table].layers[size_t(b.layer)];
    const int t = b.retro_step[nr];
    for (int r = 0; r < b.num_rows; ++r) {
      if (b.tables[r] != table || r == nr) continue;
      auto it = std::find_if(ls.cache.begin(), ls.cache.end(),
                             [&](const CachedState& c) { return c.step == b.retro_step[r]; });
      SKIM_REQUIRE(it != ls.cache.end(), "policy '{}': no cached output for the token of step {}", config_.spec,
                   b.retro_step[r]);
      float* out = b.out + size_t(r) * b.num_heads * d;
      if (sparse) {
        for (int q = 0; q < b.num_heads; ++q)
          merge_state(it->o.data() + size_t(q) * d, it->lse[size_t(q)], out + size_t(q) * d,
                      lse[size_t(r) * b.num_heads + q], d);
      }
      std::copy(it->o.begin(), it->o.end(), out);
    }
    CachedState c;
    c.step = t;
    c.o.assign(b.out + size_t(nr) * b.num_heads * d, b.out + size_t(nr + 1) * b.num_heads * d);
    c.lse.assign(lse.begin() + long(size_t(nr) * b.num_heads), lse.begin() + long(size_t(nr + 1) * b.num_heads));
    ls.cache.push_back(std::move(c));
    while (!ls.cache.empty() && ls.cache.front().step <= t - (window_ - 1)) ls.cache.pop_front();
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
          .sequence_state = true};
}

}  // namespace skim
