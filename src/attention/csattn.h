// CSAttention (seeds/004; DESIGN.md section 9): a selector that indexes the prompt by its
// queries. Per sequence, layer and KV group, after prefill: the prefill queries of the group's
// query heads are split into M subspaces, clustered by cosine k-means into C centroids per
// subspace, and each centroid keeps the top-L keys by partial score in a sorted list of fixed
// capacity. At decode a query (the group's mean query, or each query head's) picks its nearest
// centroid per subspace, the M lists are gathered and their scores summed by key index, the
// recent window is added, and the top K = keep x context keys are attended. New keys are
// try-inserted into every list. Scores are stored as fp16, key indices as int32.
//
// Partial score of centroid c (unit) and key slice k_s:
//   score=dot (default, ours): c . k_s, and a query weights its subspace by |q_s|, so the sum
//     approximates q . k = sum_s q_s . k_s with q_s ~ |q_s| c;
//   score=cos (the paper's "l2-normalise subspace vectors when clustering and centroid
//     scoring"): c . k_s / |k_s|, unit weights. It drops the key norms and the uneven weight
//     of the subspaces, which rank badly on SmolLM2 (bench/results/2026-11-24-cpu-cs-recall/).
// A key missing from a picked list (its score there is below the list's minimum):
//   missing=mean (default, ours): counts the mean score of the prompt keys the list left out
//     (its `tail`, kept per list), so each list adds score - tail;
//   missing=zero (the paper's sum over the lists a key appears in): counts 0, which ranks a
//     key by how many lists hold it more than by its scores when the tails are far from 0.
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "attention/cs_kernel_args.h"
#include "attention/policy_spec.h"
#include "backend/cpu/cs_kernels.h"
#include "backend/cpu/top_list.h"
#include "attention/selector.h"

namespace skim {

// Defaults: bench/results/2026-11-24-cpu-cs-recall/ measured them on SmolLM2-135M at 4K (top-K
// recall for the KV bytes read); the paper's own choices are score=cos, missing=zero, a search
// per query head, and (the text lost its values) M = 8, L = 0.1 here before.
struct CsParams {
  int subspaces = 4;         // M; head_dim must divide evenly
  int centroids = 64;        // C per subspace
  int iters = 10;            // k-means iterations
  double list = 0.2;         // L: <= 1 a fraction of the prefill length, > 1 entries
  double keep = 0.3;         // K = keep x context keys attended (the paper's 0.05 costs SmolLM2 +20%)
  int window = 64;           // recent keys always attended
  int step = 1;              // search every `step` decode steps, reuse the selection between
  double backoff = 0.3;      // best cosine below this: use the top `backoff_top` centroids
  int backoff_top = 2;
  bool pool_group = true;    // one group-mean query per KV group instead of one per query head
  bool score_dot = true;     // lists score c . k_s (keys not normalised), decode weights by |q_s|
  bool missing_mean = true;  // a key missing from a picked list counts that list's tail mean, not 0
  bool recall = false;       // measure recall of the true top-K (a dense scoring pass per select)
  double recall_keep = 0;    // the K of that recall as a fraction of the context; 0: keep
  int dense_layers = 0;      // layers attended densely: no tables are built for them
  int max_points = 16384;    // `points`: k-means runs on at most this many query vectors (strided sample)
};

// The `cs` part of a policy string, defaults filled in and every value range-checked
// (DESIGN.md section 9 defaults).
CsParams cs_params(const PolicyPart& part);


// The tables of one (sequence, layer, KV group): built from the group's prompt queries at the
// sequence's first decode step, then streamed into.
struct CsGroupTables {
  std::vector<float> queries;  // prefill queries [n][group][head_dim] until the build
  int num_queries = 0;
  bool built = false;
  std::vector<float> centroids;  // [M][C][ds], unit
  // The M x C lists (TopList), flat: list l's slots at [l * list_capacity, +list_capacity).
  int list_capacity = 0;
  std::vector<int32_t> list_index;   // [M][C][L] key positions
  std::vector<uint16_t> list_score;  // [M][C][L] fp16
  std::vector<int32_t> list_size;    // [M][C] slots in use
  std::vector<int> admit;        // [M][C]: each list's admit_key(), contiguous, so that the
                                 // many refused inserts touch no list
  std::vector<float> tail;       // [M][C]: mean score of the prompt keys a list left out
  std::vector<std::vector<int32_t>> picks;  // per unit: last scored selection (step > 1)
  int searches = 0;                         // selects since the build
  int indexed = 0;  // keys [0, indexed) are in the lists (rewrites, e.g. rectify, are not re-inserted)
  int search_window = 0;  // window start at the last search: reused selections keep [it, context)

  int num_lists() const { return int(list_size.size()); }
  TopList list(int l) {
    const size_t at = size_t(l) * size_t(list_capacity);
    return TopList(list_index.data() + at, list_score.data() + at, &list_size[size_t(l)], list_capacity);
  }
  // For reading only: the view's writing members must not be called.
  TopList list(int l) const { return const_cast<CsGroupTables*>(this)->list(l); }
  CsTablesView view() const {
    return {centroids.data(), list_index.data(), list_score.data(), list_size.data(), tail.data()};
  }
};

class CsSelector : public Selector {
 public:
  explicit CsSelector(CsParams p) : p_(p) {}
  std::string name() const override { return "cs"; }
  void observe(const AttentionBatch& batch) override;
  void select(const SelectInput& in, Selection& out) override;
  void forget(const PageTable* table) override { seqs_.erase(table); }
  void fork(const PageTable* from, const PageTable* to) override;
  bool keeps_sequence_state() const override { return true; }  // the centroid tables
  std::map<std::string, double> counters() const override;

  // Table bytes held now (centroids and tails as fp32, list entries as int32 + fp16), all sequences.
  uint64_t table_bytes() const;
  // A sequence's tables at a layer and KV head (tests check them against their definition);
  // null when there are none.
  const CsGroupTables* tables(const PageTable* seq, int layer, int kv_head) const;

 private:
  using GroupTable = CsGroupTables;
  struct SeqState {
    std::vector<std::vector<GroupTable>> layers;  // [layer][kv_head]
  };

  // The tables of one layer's KV groups from their prompt queries and the keys [0, num_keys).
  void build_layer(std::vector<GroupTable>& heads, const SeqKV& kv0, int group, int num_keys);
  void insert_key(GroupTable& g, int32_t pos, const float* key, int d);
  // One search of cpu::cs_select over g's tables for query q: the n_pick touched keys below wb
  // with the largest summed score (ties by position), by descending score when `ordered`, else
  // by position, into picks. Returns the table bytes read (list entries, tails with missing=mean).
  uint64_t search_one(const GroupTable& g, const float* q, int d, int ctx, int wb, int n_pick, bool ordered,
                      std::vector<int32_t>& picks);
  // gathered: mark_ of the search just made (null between searches).
  void measure_recall(const SelectInput& in, const std::vector<KeyRange>& ranges, int h, const uint8_t* gathered,
                      int window_begin);

  CsParams p_;
  std::unordered_map<const PageTable*, SeqState> seqs_;
  cpu::CsSelectScratch scratch_;       // the search's per-key sums, kept zero between searches
  std::vector<uint8_t> candidates_;    // recall: the last search's gathered keys
  std::vector<float> pooled_;
  // Counters.
  uint64_t selects_ = 0, searched_ = 0, selected_sum_ = 0;
  CsSelectStats stats_;  // the searches': table bytes, union sizes, back-offs, centroid cosines
  struct LayerRecall {
    uint64_t hits = 0, total = 0, candidate_hits = 0, candidate_total = 0, ceiling_hits = 0;
  };
  std::vector<LayerRecall> recall_;  // per layer
};

}  // namespace skim
