// The attention policy interface the forward pass calls, once per layer, for a batch of rows
// (tokens of one or several sequences at their positions). A policy decides which keys each
// (row, query head) reads and how states are combined; DESIGN.md section 3 describes the
// stages. The forward pass has already written the rows' K/V into the cache.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/attend.h"
#include "backend/cpu/split_attend.h"
#include "kv/paged_kv_cache.h"

namespace skim {

struct AttentionBatch {
  int layer = 0;
  int num_rows = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;
  bool decode = false;  // one new token per sequence (a decode step) vs a prefill chunk
  KVLayerView kv;
  const int32_t* positions = nullptr;       // [num_rows]
  const PageTable* const* tables = nullptr;  // [num_rows], the row's sequence
  const float* q = nullptr;      // [num_rows][num_heads][head_dim], after RoPE
  const float* q_pre = nullptr;  // same, before RoPE (MAC matches on it)
  float* out = nullptr;          // [num_rows][num_heads][head_dim]
  // RetroAttention (decode only; null otherwise): per row, the decode step in which the row's
  // token was first fed. A sequence's newest row has the largest step; its other rows are
  // past tokens recomputed for a retrospective update.
  const int32_t* retro_step = nullptr;

  // The CPU attention kernels' view of the batch (backend/cpu/split_attend.h).
  AttendRows rows() const { return {num_heads, num_kv_heads, head_dim, scale, kv, tables, q, out}; }
};

// Work counters, summed over calls; the engine reports them per decode step.
struct AttentionStats {
  uint64_t keys_read = 0;     // key/value token rows read, summed over KV heads and layers
  uint64_t decode_calls = 0;  // layer calls in decode steps
  uint64_t decode_keys_read = 0;
  uint64_t decode_metadata_bytes = 0;  // digests, tables read to select
  uint64_t decode_rows = 0;            // (row, layer) pairs attended in decode steps
  uint64_t decode_context = 0;         // keys visible to those rows, per KV head: dense's reads

  // One layer call of a decode step: `keys` read, `metadata` bytes read to select, `rows`
  // attended, `context` keys visible to them.
  void add_decode_call(uint64_t keys, uint64_t metadata, uint64_t rows, uint64_t context) {
    keys_read += keys;
    decode_calls += 1;
    decode_keys_read += keys;
    decode_metadata_bytes += metadata;
    decode_rows += rows;
    decode_context += context;
  }
};

constexpr int kAllPromptQueries = 1 << 30;

// Work a policy asks of the engine between forward passes (DESIGN.md section 3).
struct EngineCorrections {
  int rectify_every = 0;  // ReSA: re-encode the last f generated tokens densely every f tokens
  int retro_window = 0;   // RetroAttention: each decode step also re-runs the last w-1 tokens
  // The policy learns from the queries of the last N prompt positions (CSAttention builds its
  // tables from all of them: kAllPromptQueries; MAC fills its rings from its window), so a
  // policy switched in after the prefill has the engine re-encode those positions.
  int prompt_queries = 0;
};

class AttentionPolicy {
 public:
  virtual ~AttentionPolicy() = default;
  virtual std::string name() const = 0;
  virtual void attend(const AttentionBatch& batch) = 0;
  // Called when a sequence's cache is released, so per-sequence state can be dropped.
  virtual void forget(const PageTable* /*table*/) {}
  // `to` is a copy of `from` (Engine::fork_sequence): per-sequence state follows the copy.
  virtual void fork(const PageTable* /*from*/, const PageTable* /*to*/) {}
  // Whether the policy keeps state per sequence beyond its cache (MAC rings, CS tables, Retro
  // outputs). Without any, a copy of a sequence's first tokens is all a new sequence with
  // those tokens needs (the server's prefix cache).
  virtual bool keeps_sequence_state() const { return false; }
  // Method-specific counters for reports (name -> value): CS recall, Retro budget growth, ...
  virtual std::map<std::string, double> counters() const { return {}; }
  virtual EngineCorrections corrections() const { return {}; }
  // The canonical policy string (all parameters spelled out).
  virtual std::string spec() const { return name(); }

  AttentionStats& stats() { return stats_; }
  const AttentionStats& stats() const { return stats_; }

  // Sees every batch after attention wrote batch.out (evaluation: output error vs dense).
  using Observer = std::function<void(const AttentionBatch&)>;
  void set_observer(Observer o) { observer_ = std::move(o); }
  // Sees every choice of keys a sparse selector makes in a decode step, before attention:
  // per (row, KV head) one key list per unit (one shared by the group, or one per query head).
  // Layers read densely make none (evaluation: skim eval's needle coverage).
  using SelectionObserver =
      std::function<void(const AttentionBatch&, int row, int kv_head, const std::vector<std::vector<KeyRange>>&)>;
  void set_selection_observer(SelectionObserver o) { selection_observer_ = std::move(o); }
  // Sees a page selector's choice over guessed queries of a later layer in a decode step
  // (evaluation: skim eval --locality scores copying that layer's KV ahead of its query). The
  // forward asks for guesses only while an observer is set (wants_speculation), and speculate()
  // reports the choice over `guess` (its layer, KV view and queries) without attending or
  // counting anything. Per-token selectors (cs) and dense layers report nothing.
  void set_speculation_observer(SelectionObserver o) { speculation_observer_ = std::move(o); }
  bool wants_speculation() const { return bool(speculation_observer_); }
  virtual void speculate(const AttentionBatch& /*guess*/) {}

 protected:
  void notify(const AttentionBatch& b) const {
    if (observer_) observer_(b);
  }
  bool has_selection_observer() const { return bool(selection_observer_); }
  void notify_selection(const AttentionBatch& b, int row, int kv_head,
                        const std::vector<std::vector<KeyRange>>& heads) const {
    if (selection_observer_) selection_observer_(b, row, kv_head, heads);
  }
  void notify_speculation(const AttentionBatch& b, int row, int kv_head,
                          const std::vector<std::vector<KeyRange>>& heads) const {
    if (speculation_observer_) speculation_observer_(b, row, kv_head, heads);
  }
  AttentionStats stats_;
  Observer observer_;
  SelectionObserver selection_observer_, speculation_observer_;
};

// Dense attention of every row of `batch` over all its visible keys, into `out`
// ([num_rows][num_heads][head_dim]): the reference a policy's output is compared with.
void attend_dense(const AttentionBatch& batch, float* out);

// Parses a policy string (`dense`, later `quest:budget=0.1+art`, ...). Unknown names and keys
// are errors naming them.
std::unique_ptr<AttentionPolicy> make_policy(const std::string& spec);

}  // namespace skim
