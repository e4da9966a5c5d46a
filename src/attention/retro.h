// RetroAttention (seeds/000; DESIGN.md sections 2, 3, 9) at the attention level. The engine
// runs each decode step with the newest token and the last w-1 tokens of the sequence (rows
// marked by AttentionBatch::retro_step). Per layer:
//  - the newest row attends with the base page selector (Quest or ReSA's block selection) and
//    its state (o, lse) goes into the output cache, which keeps the last w-1 tokens;
//  - a past row (step u) attends only to the pages selected at this step that it has not seen
//    (RetroMask value < u), and that supplementary state is merged into its cached state; the
//    merged output is the row's attention output, and the cache keeps it for later updates.
// In the layers the base keeps dense, every page was seen already: past rows output their
// cached state. Prefill is dense. The prompt's last tokens are never past rows: they attended
// densely, so nothing is unseen for them; the window fills as decoding proceeds.
#pragma once

#include <deque>
#include <unordered_map>

#include "attention/pipeline.h"
#include "attention/retro_mask.h"

namespace skim {

// RetroAttention's default window w (seeds/000).
constexpr int kRetroWindow = 2;

class RetroPolicy : public AttentionPolicy {
 public:
  RetroPolicy(PipelineConfig config, int window);
  std::string name() const override { return config_.spec; }
  std::string spec() const override { return config_.spec; }
  EngineCorrections corrections() const override;
  void attend(const AttentionBatch& batch) override;
  void forget(const PageTable* table) override {
    config_.selector->forget(table);
    seqs_.erase(table);
  }
  void fork(const PageTable* from, const PageTable* to) override;
  bool keeps_sequence_state() const override { return true; }  // the past rows' outputs
  // retro_budget_growth: keys seen per query over its window (its own selection plus the
  // supplements), relative to its own selection, summed over selection units and layers;
  // retro_extra_rows_per_step: past rows run per decode step (extra linear-layer rows).
  std::map<std::string, double> counters() const override;

 private:
  struct CachedState {
    int32_t step = 0;
    std::vector<float> o;    // [num_heads][head_dim]
    std::vector<float> lse;  // [num_heads]
  };
  struct LayerState {
    std::vector<RetroMask> masks;   // [num_kv_heads * group]: per query head or per group
    std::deque<CachedState> cache;  // the last w-1 tokens, oldest first
  };
  struct SeqState {
    std::vector<LayerState> layers;
  };
  void attend_decode(const AttentionBatch& b);

  PipelineConfig config_;
  int window_;
  std::unordered_map<const PageTable*, SeqState> seqs_;
  uint64_t own_keys_ = 0, supplement_keys_ = 0, newest_rows_ = 0, past_rows_ = 0;
};

}  // namespace skim
