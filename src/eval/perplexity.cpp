#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "skim/engine.h"

namespace skim::eval {

void BucketedNll::add(std::span<const double> nll) {
  const size_t n = nll.size(), b = sum_.size();
  for (size_t i = 0; i < n; ++i) {
    size_t k = std::min(b - 1, i * b / n);  // equal shares of the window, in order
    sum_[k] += nll[i];
    count_[k] += 1;
  }
}

std::vector<double> BucketedNll::perplexity() const {
  std::vector<double> p(sum_.size());
  for (size_t k = 0; k < sum_.size(); ++k) p[k] = count_[k] ? std::exp(sum_[k] / double(count_[k])) : 0;
  return p;
}

double BucketedNll::overall() const {
  double s = 0;
  uint64_t n = 0;
  for (size_t k = 0; k < sum_.size(); ++k) {
    s += sum_[k];
    n += count_[k];
  }
  return n ? std::exp(s / double(n)) : 0;
}

double token_nll(std::span<const float> logits, int target) {
  SKIM_REQUIRE(target >= 0 && size_t(target) < logits.size(), "token id {} outside the vocabulary of {}",
               target, logits.size());
  float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - max);
  return std::log(sum) + max - double(logits[size_t(target)]);
}

TeacherForcedRun teacher_forced_decode(Engine& engine, int seq, std::span<const int> feed,
                                       std::span<const int> targets,
                                       const std::function<double()>& overhead_seconds,
                                       const StepCallback& on_step) {
  SKIM_REQUIRE(feed.size() == targets.size(), "teacher forcing: {} inputs but {} targets", feed.size(),
               targets.size());
  TeacherForcedRun run;
  run.nll.reserve(feed.size());
  DecodeWorkMeter meter(engine, seq, overhead_seconds);
  for (size_t i = 0; i < feed.size(); ++i) {
    std::vector<float> logits = engine.decode(std::span<const int>(&seq, 1), feed.subspan(i, 1));
    meter.step_done();
    run.nll.push_back(token_nll(logits, targets[i]));
    if (on_step) on_step(int(i + 1), int(feed.size()));
  }
  run.work = meter.finish();
  return run;
}

}  // namespace skim::eval
