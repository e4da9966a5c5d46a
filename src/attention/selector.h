// Stage 1 of the attention pipeline: which keys each query head of a row may read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/attend.h"
#include "attention/page_plan.h"
#include "attention/policy.h"

namespace skim {

// Keys chosen for the query heads of one (row, KV head): one list shared by the whole GQA
// group (dense, streaming, ReSA) or one list per query head (Quest). Ranges are disjoint; when
// SelectInput::ordered they are in priority order (most important first), which a traversal
// such as ART follows, otherwise a selector may give them in any order (cs: by position).
struct Selection {
  std::vector<std::vector<KeyRange>> heads;
  uint64_t metadata_bytes = 0;  // digests or tables read to make the choice

  bool shared() const { return heads.size() == 1; }
};

struct SelectInput {
  const AttentionBatch& batch;
  int row = 0;
  int kv_head = 0;
  int context = 0;  // keys visible to the row: its position + 1
  bool ordered = true;  // a traversal follows the ranges' order (ART): give them by priority
};

class Selector {
 public:
  virtual ~Selector() = default;
  virtual std::string name() const = 0;
  // Sees every batch (prefill chunks and decode steps) before any selection in it, after its
  // K/V were written: selectors with per-sequence tables build or update them here.
  virtual void observe(const AttentionBatch& /*batch*/) {}
  virtual void select(const SelectInput& in, Selection& out) = 0;
  // Page-granular selectors that choose per row or per GQA group also plan a whole decode
  // batch at once (page_plan.h), what the backend's paged decode kernel reads; the pipeline
  // then attends through the plan. Selectors choosing per query head or per token return
  // false, and the pipeline attends their select() ranges.
  virtual bool plan(const AttentionBatch& /*batch*/, PagePlan& /*plan*/) { return false; }
  // The same pages in ART's visiting order for a GQA group: one list per (row, KV head) or per
  // row, the newest page first, then the base's priority (descending bound: the group's mean
  // query for dense and gbsa, the best of the heads keeping a page for quest; the sinks then the
  // window newest first for streaming), what the GPU's ART kernel reads. False: no group order.
  virtual bool plan_visiting(const AttentionBatch& /*batch*/, PagePlan& /*plan*/) { return false; }
  // The sequence's cache was released: drop its per-sequence state.
  virtual void forget(const PageTable* /*table*/) {}
  // `to` is a copy of `from` (Engine::fork_sequence): copy the per-sequence state.
  virtual void fork(const PageTable* /*from*/, const PageTable* /*to*/) {}
  virtual bool keeps_sequence_state() const { return false; }  // see AttentionPolicy
  // Method-specific counters for reports (name -> value), e.g. CSAttention's recall.
  virtual std::map<std::string, double> counters() const { return {}; }
};

}  // namespace skim
