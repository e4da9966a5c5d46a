// The policy pipeline (DESIGN.md section 3): select -> reuse -> traverse -> merge -> update.
// Prefill chunks always attend densely; decode rows go through the selector, except in the
// first `dense_layers` layers. Later stages (MAC reuse, ART traversal) plug in here.
#pragma once

#include <memory>

#include "attention/policy_spec.h"
#include "attention/selector.h"

namespace skim {

struct PipelineConfig {
  std::string spec;                    // canonical policy string
  std::unique_ptr<Selector> selector;  // null: dense
  int dense_layers = 0;
  EngineCorrections corrections;
};

// Dense causal attention of a prefill batch (rows of consecutive positions per sequence).
void attend_prefill(const AttentionBatch& batch);

class PipelinePolicy : public AttentionPolicy {
 public:
  explicit PipelinePolicy(PipelineConfig config);
  std::string name() const override { return config_.spec; }
  std::string spec() const override { return config_.spec; }
  EngineCorrections corrections() const override { return config_.corrections; }
  void attend(const AttentionBatch& batch) override;
  void forget(const PageTable* table) override;
  void fork(const PageTable* from, const PageTable* to) override {
    if (config_.selector) config_.selector->fork(from, to);
  }
  std::map<std::string, double> counters() const override {
    return config_.selector ? config_.selector->counters() : std::map<std::string, double>{};
  }

 private:
  PipelineConfig config_;
  std::unique_ptr<Selector> dense_;
};

}  // namespace skim
