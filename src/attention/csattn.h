// CSAttention (seeds/004; DESIGN.md section 9): a selector that indexes the prompt by its
// queries. Per sequence, layer and KV group, after prefill: the prefill queries of the group's
// query heads are split into M subspaces, clustered by cosine k-means into C centroids per
// subspace, and each centroid keeps the top-L keys by cosine partial score in a sorted list of
// fixed capacity. At decode a query picks its nearest centroid per subspace, the M lists are
// gathered and their scores summed by key index, the recent window is added, and the top
// K = keep x context keys are attended. New keys are try-inserted into every list.
//
// Score: cos(c, k_s) = c . k_s / |k_s| with c a unit centroid and k_s the key's subspace slice
// (the paper's "l2-normalise subspace vectors when clustering and centroid scoring"); summed
// over subspaces with unit weights. Scores are stored as fp16, key indices as int32.
// Variant `score=dot` (ours): lists keep c . k_s with the raw key slice, and a query sums
// |q_s| x score over its subspaces, so the total approximates q . k (key norms and the uneven
// weight of the subspaces are kept, which cosine scores drop).
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "attention/selector.h"

namespace skim {

struct CsParams {
  int subspaces = 8;        // M; head_dim must divide evenly
  int centroids = 64;       // C per subspace
  int iters = 10;           // k-means iterations
  double list = 0.1;        // L: <= 1 a fraction of the prefill length, > 1 entries
  double keep = 0.05;       // K = keep x context keys attended
  int window = 64;          // recent keys always attended
  int step = 1;             // search every `step` decode steps, reuse the selection between
  double backoff = 0.3;     // best cosine below this: use the top `backoff_top` centroids
  int backoff_top = 2;
  bool pool_group = false;  // one group-mean query per KV group instead of one per query head
  bool score_dot = false;   // lists score c . k_s (keys not normalised), decode weights by |q_s|
  bool recall = false;      // measure recall of the true top-K (a dense scoring pass per select)
  int dense_layers = 0;     // layers attended densely: no tables are built for them
  int max_points = 16384;   // k-means runs on at most this many query vectors (strided sample)
};

// A bounded list of (key index, score), sorted by descending score. Capacity is fixed at
// construction: a new entry replaces the minimum only when its score is larger.
class TopList {
 public:
  explicit TopList(int capacity = 0) : capacity_(capacity) {}
  // Returns whether the entry went in.
  bool try_insert(int32_t index, float score);
  int size() const { return int(index_.size()); }
  int capacity() const { return capacity_; }
  int32_t index(int i) const { return index_[size_t(i)]; }
  float score(int i) const;
  static constexpr size_t kEntryBytes = sizeof(int32_t) + sizeof(uint16_t);

 private:
  int capacity_;
  std::vector<int32_t> index_;
  std::vector<uint16_t> score_;  // fp16
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

  // Table bytes held now (centroids as fp32, list entries as int32 + fp16), all sequences.
  uint64_t table_bytes() const;

 private:
  struct GroupTable {
    std::vector<float> queries;  // prefill queries [n][group][head_dim] until the build
    int num_queries = 0;
    bool built = false;
    std::vector<float> centroids;  // [M][C][ds], unit
    std::vector<TopList> lists;    // [M][C]
    std::vector<std::vector<int32_t>> picks;  // per unit: last scored selection (step > 1)
    int searches = 0;                         // selects since the build
    int indexed = 0;  // keys [0, indexed) are in the lists (rewrites, e.g. rectify, are not re-inserted)
    int search_window = 0;  // window start at the last search: reused selections keep [it, context)
  };
  struct SeqState {
    std::vector<std::vector<GroupTable>> layers;  // [layer][kv_head]
  };

  void build(GroupTable& g, const SeqKV& kv, int group, int num_keys);
  void insert_key(GroupTable& g, int32_t pos, const float* key, int d);
  // Summed list scores of the chosen centroids for one query: fills acc_/touched_.
  uint64_t gather(const GroupTable& g, const float* q, int d);
  void measure_recall(const SelectInput& in, const std::vector<KeyRange>& ranges, int h);

  CsParams p_;
  std::unordered_map<const PageTable*, SeqState> seqs_;
  // Scratch of select.
  std::vector<float> acc_;
  std::vector<int32_t> touched_;
  std::vector<uint8_t> mark_;
  // Counters.
  uint64_t selects_ = 0, searched_ = 0, union_sum_ = 0, selected_sum_ = 0, recall_hits_ = 0, recall_total_ = 0;
  uint64_t backoffs_ = 0, subspace_searches_ = 0;
};

}  // namespace skim
