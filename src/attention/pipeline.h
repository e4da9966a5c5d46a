// The policy pipeline (DESIGN.md section 3): select -> reuse -> traverse -> merge -> update.
// Prefill chunks always attend densely; decode rows go through the selector, except in the
// first `dense_layers` layers. Decode is plan + kernel: a selector that plans pages is attended
// through the paged decode kernel over its page plan (with `mac` too: pipeline_mac.cpp), a
// per-token selector (cs, oracle) through the token decode kernel over its token plan. With
// `art` (traverse) the group rule runs the ART decode kernel over the base's visiting plan
// (pipeline_art.cpp); the per-head rule goes query head by query head (pipeline_heads.cpp).
#pragma once

#include <memory>

#include <optional>

#include "attention/art.h"
#include "attention/mac.h"
#include "attention/paged_decode_args.h"
#include "attention/policy_spec.h"
#include "attention/selector.h"
#include "attention/token_plan.h"

namespace skim {

struct PipelineConfig {
  std::string spec;                    // canonical policy string
  std::unique_ptr<Selector> selector;  // null: dense
  int dense_layers = 0;
  EngineCorrections corrections;
  std::unique_ptr<MacReuse> mac;  // reuse stage; null: none
  std::optional<ArtParams> art;   // traverse stage; none: exhaustive
  ArtOrder art_order = ArtOrder::Given;  // the block order for the selector's layers
};

// MAC's ring rows: each row's state over its prefix [0, mac_prefix_end(position, band,
// page_size)), written by the prefill's attention beside the row's output.
struct PrefixStates {
  int band = 0;
  float* o = nullptr;    // [num_rows][num_heads][head_dim]
  float* lse = nullptr;  // [num_rows][num_heads]
};

// The lists of a decode batch's page plan as key positions, per (row, KV head) and per unit (one
// list shared by the group, or one per query head of a masked plan): what a selection observer
// sees (AttentionPolicy::set_selection_observer). `rows` (optional) names the rows to report.
void for_each_plan_selection(const AttentionBatch& b, const PagePlan& plan,
                             const std::function<void(int row, int kv_head, const std::vector<std::vector<KeyRange>>&)>& f,
                             const std::vector<bool>* rows = nullptr);

// Dense causal attention of a prefill batch (rows of consecutive positions per sequence), and
// the rows' prefix states when `prefix` is given.
void attend_prefill(const AttentionBatch& batch, const PrefixStates* prefix = nullptr);

class PipelinePolicy : public AttentionPolicy {
 public:
  explicit PipelinePolicy(PipelineConfig config);
  std::string name() const override { return config_.spec; }
  std::string spec() const override { return config_.spec; }
  EngineCorrections corrections() const override { return config_.corrections; }
  void attend(const AttentionBatch& batch) override;
  void speculate(const AttentionBatch& guess) override;
  void forget(const PageTable* table) override;
  void fork(const PageTable* from, const PageTable* to) override {
    if (config_.selector) config_.selector->fork(from, to);
    if (config_.mac) config_.mac->fork(from, to);  // a forked sequence keeps its MAC rings
  }
  bool keeps_sequence_state() const override {
    return config_.mac || (config_.selector && config_.selector->keeps_sequence_state());
  }
  std::map<std::string, double> counters() const override;
  const MacReuse* mac() const { return config_.mac.get(); }

 private:
  // ART's group rule: the visiting plan and the ART decode kernel (pipeline_art.cpp).
  void attend_art_group(const AttentionBatch& b, Selector& selector, bool sparse);
  // The ART decode kernel over a plan of one list per (row, KV head) in visiting order, into o
  // and lse (null: not kept), its counters added; returns the keys read (pipeline_art.cpp).
  uint64_t run_art_kernel(const AttentionBatch& b, const PagePlan& plan, float* o, float* lse);
  // ART per query head, with MAC before it when the policy has both (pipeline_heads.cpp).
  void attend_heads(const AttentionBatch& b, Selector& selector, bool sparse);
  // Decode through a page plan: the backend's paged decode kernel over the plan's lists.
  void attend_plan(const AttentionBatch& b, const PagePlan& plan, bool sparse);
  // MAC over a base page plan: match, plan, kernel, merge (pipeline_mac.cpp). visiting (mac+art
  // on the group rule): the base's visiting plan, and ART's kernel over `below` in its order.
  void attend_mac_plan(const AttentionBatch& b, const PagePlan& base, bool sparse, const PagePlan* visiting = nullptr);
  void notify_plan(const AttentionBatch& b, const PagePlan& plan) const;
  // Decode through a token plan: a per-token selection (cs, oracle) and the backend's token
  // decode kernel over it.
  struct DecodeCounts {
    uint64_t keys = 0, metadata = 0, context = 0;
  };
  void attend_tokens(const AttentionBatch& b, Selector& selector, bool sparse);
  // MAC over a per-token base (cs): its token plan cut at each row's prefix end (pipeline_mac.cpp).
  void attend_mac_tokens(const AttentionBatch& b, Selector& selector, bool sparse);
  void match_mac(const AttentionBatch& b, uint64_t& meta);  // MAC's match stage into mac_buffers_
  void merge_mac(const AttentionBatch& b);                   // and its merge and ring update
  // The decode rows' page tables and lengths into row_pages_ and row_lens_; returns the stride.
  int flatten_row_pages(const AttentionBatch& b);
  // Paged decode arguments over those tables (what the token kernel takes as `attn`).
  PagedDecodeArgsF32 row_pages_args(const AttentionBatch& b, int max_pages, float* o, float* lse = nullptr) const;
  void plan_tokens(const AttentionBatch& b, Selector& selector, bool sparse, DecodeCounts& counts);

  PipelineConfig config_;
  std::unique_ptr<Selector> dense_;
  ArtStats art_stats_;
  PagePlan plan_;      // the decode batch's, kept to reuse its memory
  PagePlan visiting_;  // ART's group order (art:stop=group), likewise
  PagePlan visiting_lists_;         // the same as one list per (row, KV head)
  std::vector<int32_t> art_reads_;  // pages the ART kernel read of each list
  TokenPlan tokens_;   // a per-token selection's, likewise
  std::vector<Selection> selections_;
  std::vector<int32_t> row_pages_, row_lens_;  // the decode rows' page tables, flat, and lengths
  struct MacBuffers {  // attend_mac_plan's, kept to reuse their memory
    std::vector<MacReuse::Match> matches;
    std::vector<int32_t> band_begin;
    PagePlan rows, below, above;
    TokenPlan below_tokens, above_tokens;
    std::vector<int32_t> band_tokens;  // attend_mac_tokens: a hit head's band+tail
    std::vector<uint8_t> read_keys;    // and the keys a group reads, for the counters
    std::vector<float> cache_o, cache_lse, below_o, below_lse, above_o, above_lse;
  } mac_buffers_;
};

}  // namespace skim
