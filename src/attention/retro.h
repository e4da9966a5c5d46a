// RetroAttention (seeds/000; DESIGN.md sections 2, 3, 9) at the attention level. The engine
// runs each decode step with the newest token and the last w-1 tokens of the sequence (rows
// marked by AttentionBatch::retro_step). Per layer, as plan + kernel (attention/
// retro_decode_args.h, what the GPU runs too):
//  - the newest row attends with the base page selector's plan (Quest's union with per-head
//    masks, or ReSA's group list) and its state (o, lse) goes into the output cache, which keeps
//    the last w-1 tokens;
//  - a past row (step u) attends only to the pages selected at this step that it has not seen
//    (the unit's retrospective mask A[p] < u, Algorithm 2), whole pages, and that supplementary
//    state is merged into its cached state; the merged output is the row's attention output, and
//    the cache keeps it for later updates;
//  - one paged decode call attends every row's list (cpu::retro_page_plan, then
//    cpu::paged_decode_attention, then cpu::retro_merge).
// In the layers the base keeps dense, every page was seen already: past rows output their
// cached state. Prefill is dense. The prompt's last tokens are never past rows: they attended
// densely, so nothing is unseen for them; the window fills as decoding proceeds.
#pragma once

#include <vector>
#include <unordered_map>

#include "attention/pipeline.h"

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
  void forget(const PageTable* table) override;
  void fork(const PageTable* from, const PageTable* to) override;
  bool keeps_sequence_state() const override { return true; }  // the past rows' outputs
  // retro_budget_growth: keys seen per query over its window (its own selection plus the
  // supplements), relative to its own selection, summed over selection units and layers;
  // retro_extra_rows_per_step: past rows run per decode step (extra linear-layer rows).
  std::map<std::string, double> counters() const override;

 private:
  void attend_decode(const AttentionBatch& b);
  // The slot of a sequence's state (assigned on first sight), and the layer's arrays, grown to
  // hold the batch's pages.
  int slot_of(const PageTable* t);
  void reserve(const AttentionBatch& b);

  PipelineConfig config_;
  int window_;
  // Per-sequence state in slots (retro_decode_args.h's layouts): per layer the masks A and the
  // output cache of the last w-1 tokens.
  struct Layer {
    std::vector<int32_t> a;          // [slots][units][stride]
    std::vector<float> o, lse;       // [slots][w-1][heads][d], [slots][w-1][heads]
    std::vector<int32_t> step;       // [slots][w-1]
  };
  std::vector<Layer> layers_;
  int slots_ = 0, stride_ = 0, units_ = 0, heads_ = 0, head_dim_ = 0;
  std::unordered_map<const PageTable*, int> slots_of_;
  std::vector<int> free_;
  // A decode step's buffers, kept for their memory.
  struct NewestRows {
    std::vector<int> rows;         // the batch's newest rows
    std::vector<int32_t> base_row;  // [batch] a newest row's index among them, else -1
    std::vector<int32_t> positions;
    std::vector<const PageTable*> tables;
    std::vector<float> q, q_pre;
    AttentionBatch view(const AttentionBatch& b);
  } newest_batch_;
  PagePlan base_, plan_;
  std::vector<int32_t> row_slot_, newest_;
  std::vector<uint8_t> age_;
  std::vector<float> o_, lse_;
  uint64_t own_keys_ = 0, supplement_keys_ = 0, newest_rows_ = 0, past_rows_ = 0;
};

}  // namespace skim
