// The selectors: dense (every key), streaming (sinks + recent window), Quest (top pages per
// query head by the digest bound), and ReSA's group block-sparse selection (top blocks per GQA
// group by the bound of the group-mean query). Constants: DESIGN.md section 9.
#pragma once

#include <memory>

#include "attention/policy_spec.h"
#include "attention/quest_page_select_args.h"  // quest_budget_tokens
#include "attention/selector.h"

namespace skim {

class DenseSelector : public Selector {
 public:
  std::string name() const override { return "dense"; }
  void select(const SelectInput& in, Selection& out) override;
  bool plan(const AttentionBatch& batch, PagePlan& plan) override;  // each row's own pages
  // Every page by the group's mean-query bound (gbsa's ranking keeping every page).
  bool plan_visiting(const AttentionBatch& batch, PagePlan& plan) override;

 private:
  PagePlan rows_;
};

// StreamingLLM: attention sinks plus a recent window, in whole pages (window_page_plan_args.h:
// the pages holding a sink token or a token of the last `window`), the same on both backends.
struct StreamingParams {
  int sink = 4;
  int window = 1024;
};
// A streaming policy part's keys (sink, window): the CPU policy and the GPU planner read them
// through this parser.
StreamingParams streaming_params(const PolicyPart& p);

class StreamingSelector : public Selector {
 public:
  explicit StreamingSelector(StreamingParams p) : p_(p) {}
  std::string name() const override { return "streaming"; }
  void select(const SelectInput& in, Selection& out) override;
  bool plan(const AttentionBatch& batch, PagePlan& plan) override;  // cpu::window_page_plan
  bool plan_visiting(const AttentionBatch& batch, PagePlan& plan) override;  // recent_first

 private:
  StreamingParams p_;
  PagePlan rows_;  // the batch's own page tables, the plan's input (kept for its memory)
};

// Quest keeps the first two layers dense (its practice); the oracle's budget is the envelope
// at a small budget, not Quest's; ReSA rectifies every 32 tokens.
constexpr int kQuestDenseLayers = 2;
constexpr double kOracleBudget = 0.15;
constexpr int kRectifyEvery = 32;

struct QuestParams {
  // Defaults from the frontier on SmolLM2-135M (docs/results.md "Defaults"): perplexity within
  // 1% of dense needs about 3K tokens per head at 4K context and half the context at 8K.
  double budget = 0.5;    // <= 1: fraction of the context; > 1: tokens
  int min_tokens = 3072;  // floor of a relative budget
};

// quest's keys of a policy string, checked; also sets `dense_layers` (default 2). The CPU
// policy and the GPU planner (backend/cuda/decode_planner.cpp) read them through this parser.
QuestParams quest_params(const PolicyPart& p, int& dense_layers);

class QuestSelector : public Selector {
 public:
  explicit QuestSelector(QuestParams p) : p_(p) {}
  std::string name() const override { return "quest"; }
  void select(const SelectInput& in, Selection& out) override;
  // Per (row, KV head) the union of its heads' pages with a per-head mask
  // (cpu::quest_page_select).
  bool plan(const AttentionBatch& batch, PagePlan& plan) override;
  bool plan_visiting(const AttentionBatch& batch, PagePlan& plan) override;  // by_score

 private:
  bool plan_union(const AttentionBatch& batch, PagePlan& plan, bool by_score);
  QuestParams p_;
  PagePlan rows_;  // the batch's own page tables, the selection's input (kept for its memory)
};

// The oracle (evaluation only, not a method): per query head the `budget` keys of largest
// q . k, found by scoring every key. It reads all keys to choose, so it saves nothing; it is
// the upper envelope of any selector reading that many keys per head: a selector far below it
// chooses badly, one close to it is at the model's own limit.
class OracleSelector : public Selector {
 public:
  explicit OracleSelector(QuestParams p) : p_(p) {}
  std::string name() const override { return "oracle"; }
  void select(const SelectInput& in, Selection& out) override;

 private:
  QuestParams p_;  // budget and floor, as Quest's
};

struct GroupBlockParams {
  // Defaults from the frontier on SmolLM2-135M (docs/results.md "Defaults"): the group's mean
  // query dilutes a retrieval head's signal, so gbsa needs more blocks than quest's pages.
  double keep = 0.7;  // fraction of blocks (the paper's sparsity 0.9 loses 20% perplexity there)
  int n_min = 192;    // at least this many blocks (3072 tokens)
  int n_local = 1;    // most recent blocks always kept
};

// gbsa's (and resa's) keys of a policy string, checked; also sets `dense_layers` (default 0).
// The CPU policy and the GPU planner (backend/cuda/decode_planner.cpp) read them through this
// one parser.
GroupBlockParams group_block_params(const PolicyPart& p, int& dense_layers);

class GroupBlockSelector : public Selector {
 public:
  explicit GroupBlockSelector(GroupBlockParams p) : p_(p) {}
  std::string name() const override { return "gbsa"; }
  void select(const SelectInput& in, Selection& out) override;
  bool plan(const AttentionBatch& batch, PagePlan& plan) override;  // cpu::group_page_select
  bool plan_visiting(const AttentionBatch& batch, PagePlan& plan) override;  // by_score

 private:
  bool plan_group(const AttentionBatch& batch, PagePlan& plan, bool by_score);
  GroupBlockParams p_;
  PagePlan rows_;  // the batch's own page tables, the selection's input (kept for its memory)
};

}  // namespace skim
