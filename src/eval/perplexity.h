// Perplexity under sparse decoding (DESIGN.md section 7): after a dense prefill, the next M
// tokens of the text are fed one decode step at a time with the policy active (teacher
// forcing), and the perplexity of the tokens they predict is reported by position bucket, so
// error accumulating in the KV cache shows as a rising curve.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "eval/work.h"

namespace skim {
class Engine;
}

namespace skim::eval {

// Negative log-likelihood sums by position bucket; windows of the same length add up.
class BucketedNll {
 public:
  explicit BucketedNll(int buckets) : sum_(size_t(buckets)), count_(size_t(buckets)) {}
  // nll[i] is the loss at decode step i of a window of nll.size() steps.
  void add(std::span<const double> nll);
  std::vector<double> perplexity() const;  // per bucket; 0 for an empty bucket
  double overall() const;
  int buckets() const { return int(sum_.size()); }

 private:
  std::vector<double> sum_;
  std::vector<uint64_t> count_;
};

// -log softmax(logits)[target], in double precision.
double token_nll(std::span<const float> logits, int target);

struct TeacherForcedRun {
  std::vector<double> nll;  // per step: loss of targets[i]
  DecodeWork work;
};

using StepCallback = std::function<void(int done, int total)>;

// Decodes feed[i] at step i on `seq` under the engine's current policy and scores the logits
// against targets[i] (the next token of the text). `overhead_seconds` reads the evaluation
// time spent inside the loop (output-error observer), which the speed excludes.
TeacherForcedRun teacher_forced_decode(Engine& engine, int seq, std::span<const int> feed,
                                       std::span<const int> targets,
                                       const std::function<double()>& overhead_seconds = {},
                                       const StepCallback& on_step = {});

}  // namespace skim::eval
