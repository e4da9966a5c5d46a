// Long-generation agreement (DESIGN.md section 7): greedy generation from the same prompt
// with dense attention and with the policy; how many tokens match before the first
// divergence, and how similar the whole sequences are (normalised edit similarity over ids).
#pragma once

#include <span>
#include <vector>

#include "eval/perplexity.h"
#include "eval/work.h"

namespace skim {
class Engine;
}

namespace skim::eval {

// Index of the first position where a and b differ; min(size) when one is a prefix of the other.
size_t first_divergence(std::span<const int> a, std::span<const int> b);
size_t levenshtein(std::span<const int> a, std::span<const int> b);
// 1 - levenshtein / max(len); 1 for two empty sequences.
double edit_similarity(std::span<const int> a, std::span<const int> b);

struct GreedyRun {
  std::vector<int> tokens;
  DecodeWork work;
};

// Decodes `first` on `seq` (the last prompt token, so the first generated token is already
// the policy's), then feeds back the argmax `count` times in all: `count` generated tokens.
GreedyRun greedy_decode(Engine& engine, int seq, int first, int count, const StepCallback& on_step = {});

struct AgreementTally {
  double first_divergence_sum = 0;
  double similarity_sum = 0;
  int runs = 0;
  int tokens = 0;  // generated per run
  void add(std::span<const int> reference, std::span<const int> candidate);
  double mean_first_divergence() const { return runs ? first_divergence_sum / runs : 0; }
  double mean_similarity() const { return runs ? similarity_sum / runs : 0; }
};

}  // namespace skim::eval
