// Attention-output error per layer (DESIGN.md section 7): on every decode batch the policy
// computes, the dense output of the same batch is computed too, and
// ||o_policy - o_dense|| / ||o_dense|| is recorded per (row, query head). The decode is
// teacher-forced, so errors measure the policy, not a diverged trajectory.
#pragma once

#include <vector>

#include "attention/policy.h"

namespace skim::eval {

struct LayerError {
  double mean = 0;
  double p90 = 0;
  size_t samples = 0;
};

class OutputErrorMeter {
 public:
  explicit OutputErrorMeter(int num_layers) : errors_(size_t(num_layers)) {}
  // Observes `policy` until another meter or observer replaces it (set_policy makes a new
  // policy object, so attach again after each).
  void attach(AttentionPolicy& policy);
  void record(const AttentionBatch& batch);  // what the observer does; public for tests

  std::vector<LayerError> per_layer() const;
  double mean() const;              // over every sample of every layer
  double seconds() const { return seconds_; }  // time spent computing the reference
  void merge(const OutputErrorMeter& other);

 private:
  std::vector<std::vector<float>> errors_;  // per layer: one value per (row, head, step)
  std::vector<float> dense_;
  double seconds_ = 0;
};

}  // namespace skim::eval
