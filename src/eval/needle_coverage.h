// Where a policy loses a needle (issue 14, part 5): at every decode step of an answer, per
// layer and query head, the dense attention mass on the needle's tokens, and how much of it
// the keys the policy's selector chose hold. A layer the selector leaves dense keeps all of it.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "attention/policy.h"

namespace skim::eval {

struct TokenSpan {
  int begin = 0, end = 0;  // token positions [begin, end)
};

// Sums over (decode step, query head) of one layer.
struct LayerCoverage {
  uint64_t samples = 0;     // (step, head) pairs
  double needle_mass = 0;   // dense softmax mass on the needle's tokens
  double kept_needle = 0;   // of it, on tokens the selection kept
  double kept_mass = 0;     // dense mass on every kept token
  double top_needle = 0;    // per step, the head with the most needle mass: its needle mass
  double top_kept = 0;      // ... and the fraction of it kept
  uint64_t steps = 0;       // decode steps (for the top-head sums)

  void merge(const LayerCoverage& o);
};

class NeedleCoverageMeter {
 public:
  // Observes `policy` (both observers) for the needle at `needle` until detach.
  void attach(AttentionPolicy& policy, TokenSpan needle);
  static void detach(AttentionPolicy& policy);

  // What the observers do; public for tests.
  void on_selection(const AttentionBatch& b, int row, int kv_head, const std::vector<std::vector<KeyRange>>& heads);
  void on_attention(const AttentionBatch& b);

  const std::vector<LayerCoverage>& layers() const { return layers_; }
  void merge(const NeedleCoverageMeter& o);

 private:
  TokenSpan needle_;
  std::map<int, std::vector<std::vector<KeyRange>>> chosen_;  // kv_head -> units, this layer call
  std::vector<LayerCoverage> layers_;
};

}  // namespace skim::eval
