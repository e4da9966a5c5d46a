// MAC-Attention's reuse stage (seeds/002; DESIGN.md sections 2, 3, 9): per (sequence, layer,
// query head) a ring of the last K pre-RoPE queries and, for each, its attention state over the
// prefix [1, p-r] (1-based; here the 0-based key range [0, p+1-r) of the token at position p,
// rounded down to a page: see below).
//
// A decode query at position m matches the ring entry nearest in L2 distance of pre-RoPE
// queries; a hit when the distance is below sqrt(2d)(1-tau). On a hit the output is the
// cached prefix merged with a fresh state over the band+tail (equation (7) of the paper); on a
// miss the pipeline attends over the base selection. Either way the state cached for m covers
// its prefix and is built by merging (reused prefix or nothing) with a partial computed over
// the keys below the prefix end that were read for m: nothing is ever subtracted.
//
// Prefixes end on page boundaries: the prefix of the token at p is [0, mac_prefix_end(p)),
// the paper's [1, p-r] rounded down to a whole page (attention/mac_decode_args.h), so a band
// holds r to r + page_size - 1 keys and every part of a step is a list of whole pages, what the
// paged decode kernel reads on both backends.
//
// The ring is filled from prefill rows too: the prefill's causal attention computes each row's
// prefix state beside its output (causal_attend.h), so decode can hit from its first step.
//
// Decode runs as plan + kernel (pipeline_mac.cpp) over a base that plans pages: the match, then
// cpu::mac_page_plan cuts each head's pages at the step's prefix end, the paged decode kernel
// attends both parts, and cpu::mac_merge_states merges them with the reused prefixes. With
// `art` or a per-token base (cs) the per-head path of pipeline_heads.cpp runs instead, with
// the same prefixes.
//
// A ring holds its K entries in preallocated arrays (reserved at its first entry; memory pages
// are touched only as entries arrive), overwriting the oldest once full: a decode step
// allocates nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "attention/policy.h"
#include "attention/method_defaults.h"
#include "attention/policy_spec.h"

namespace skim {

struct MacParams {
  // The paper's 1024 makes the ring scan cost a third of dense's bytes on SmolLM2 at 4K (a 3:1
  // GQA model with 4K keys per KV head); 256 keeps dense quality on both models and reads less
  // at every context measured (SmolLM2 4K 0.87 of dense's bytes at +0.4% perplexity, 8K 0.79 at
  // -0.1%; the demo model at 16K 0.71 at -0.2%: docs/results.md, frontier group mac2).
  int window = kMacWindow;  // K: ring entries per (sequence, layer, head)
  int band = kMacBand;      // r: keys before the matched position that are recomputed
  double tau = kMacTau;     // hit when ||q~_m - q~_p|| < sqrt(2d)(1 - tau); method_defaults.h says why
  // Rows whose context is shorter attend their base without matching (the ring still fills):
  // there is little prefix to skip and the scan would cost more (the official code's 2048).
  int min_context = kMacMinContext;
};

// mac's keys of a policy string (checked against the registry by the parser): the CPU policy and
// the GPU planner (backend/cuda/decode_planner.cpp) read them through this.
MacParams mac_params(const PolicyPart& part);

// Work and match statistics of one (layer, query head), summed over decode decisions.
struct MacHeadStats {
  uint64_t decisions = 0, hits = 0;
  double skipped = 0;     // sum over decisions of (p+1-r)+ / (m+1): prefix keys not read
  double band_keys = 0;   // sum over hits of the keys read after the cached prefix: (m+1) - (p+1-r)+
  double dist = 0;        // sum of nearest normalised distances ||q~_m - q~_p|| / sqrt(2d)
  double qnorm = 0;       // sum of ||q~_m|| / sqrt(d): the isotropic model has 1
};

class MacReuse {
 public:
  static constexpr int kDistBins = 200;  // histogram of normalised distance, bins of 0.01 on [0, 2)

  explicit MacReuse(MacParams p) : p_(p) {}
  const MacParams& params() const { return p_; }

  // A prefill batch: its rows become ring entries, with their states over their prefixes computed
  // by the prefill's attention (prefix_o [num_rows][num_heads][d], prefix_lse [num_rows][num_heads]).
  void observe_prefill(const AttentionBatch& b, const float* prefix_o, const float* prefix_lse);

  struct Match {
    int slot = -1;       // ring slot of the nearest entry; -1 for an empty ring
    float dist = 0;      // its L2 distance
    bool hit = false;
    int pos = -1;        // its position p
    int prefix = 0;      // the end of p's cached prefix: a hit's band+tail starts here
  };
  // Nearest entry for each query head of a decode batch's row (out: [num_heads]), in one pass
  // over the ring; records the distance statistics. Returns whether it matched: a row whose
  // context is below min_context gets misses without a scan.
  bool match(const AttentionBatch& b, int row, Match* out);
  // The cached state (o, lse) of the slot's entry for `head`.
  const float* cached_o(const AttentionBatch& b, int row, int slot, int head) const;
  float cached_lse(const AttentionBatch& b, int row, int slot, int head) const;
  // Records one decision's work (after match) for the row at `pos`.
  void record(int layer, int head, const Match& m, int pos, int num_heads);
  // The end of the prefix cached for the token at `pos` (mac_prefix_end with this band).
  int prefix_end(int pos, int page_size) const;
  // Appends the decode row's entry: its pre-RoPE queries and per-head states over its prefix.
  void push(const AttentionBatch& b, int row, const float* o, const float* lse);

  // A ring entry of a sequence in a layer (tests): its position and state of `head`; `i`
  // counts from the oldest entry.
  struct EntryView {
    int pos = -1;
    const float* o = nullptr;
    float lse = 0;
  };
  EntryView entry(const PageTable* t, int layer, int i, int head, int head_dim) const;
  EntryView newest(const PageTable* t, int layer, int head, int head_dim) const {
    return entry(t, layer, ring_size(t, layer) - 1, head, head_dim);
  }
  int ring_size(const PageTable* t, int layer) const;

  void forget(const PageTable* t) { seqs_.erase(t); }
  void fork(const PageTable* from, const PageTable* to);

  // Per (layer, head) statistics and per-layer distance histograms (for reports and tests).
  const std::vector<std::vector<MacHeadStats>>& head_stats() const { return stats_; }
  // mac_hit_rate, mac_skipped, mac_band_keys, mac_dist_p10/p50/p90 (normalised), mac_qnorm,
  // and the same per layer as `name.L<layer>`.
  void add_counters(std::map<std::string, double>& c) const;

 private:
  // Entries in slots [0, size()), the oldest at `first` (0 until the ring is full).
  struct Ring {
    int first = 0;
    int heads = 0, width = 0;  // num_heads; num_heads * head_dim
    std::vector<int> pos;      // [K]
    std::vector<float> q_pre;  // [K][num_heads][d]
    std::vector<float> o;      // [K][num_heads][d]: state over [0, prefix_end(pos))
    std::vector<float> lse;    // [K][num_heads]
    int size() const { return int(pos.size()); }
    int slot(int i) const { return (first + i) % size(); }  // of the i-th oldest entry
  };
  using SeqRings = std::vector<Ring>;  // per layer
  Ring& ring(const AttentionBatch& b, int row);
  const Ring& ring(const AttentionBatch& b, int row) const;
  void reserve(Ring& r) const;  // K entries of r.heads, r.width
  // Writes one entry (its pre-RoPE queries [num_heads][d], states, position) over the oldest.
  void push_entry(Ring& r, int pos, const float* q_pre, const float* o, const float* lse);
  MacHeadStats& stat(int layer, int head, int num_heads);

  MacParams p_;
  std::unordered_map<const PageTable*, SeqRings> seqs_;
  std::vector<std::vector<MacHeadStats>> stats_;               // [layer][head]
  std::vector<std::vector<uint64_t>> hist_;                    // [layer][bin]
  std::vector<float> best_;  // match's nearest squared distance per head, kept to allocate once
};

}  // namespace skim
