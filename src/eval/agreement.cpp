#include "eval/agreement.h"

#include <algorithm>

#include "engine/sampler.h"
#include "skim/engine.h"

namespace skim::eval {

size_t first_divergence(std::span<const int> a, std::span<const int> b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

size_t levenshtein(std::span<const int> a, std::span<const int> b) {
  // One row of the dynamic programme at a time.
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

double edit_similarity(std::span<const int> a, std::span<const int> b) {
  size_t n = std::max(a.size(), b.size());
  return n == 0 ? 1.0 : 1.0 - double(levenshtein(a, b)) / double(n);
}

GreedyRun greedy_decode(Engine& engine, int seq, int first, int count, const StepCallback& on_step) {
  GreedyRun run;
  DecodeWorkMeter meter(engine, seq);
  int next = first;
  for (int i = 0; i < count; ++i) {
    std::vector<float> logits = engine.decode(std::span<const int>(&seq, 1), std::span<const int>(&next, 1));
    meter.step_done();
    next = argmax(logits);
    run.tokens.push_back(next);
    if (on_step) on_step(i + 1, count);
  }
  run.work = meter.finish();
  return run;
}

void AgreementTally::add(std::span<const int> reference, std::span<const int> candidate) {
  first_divergence_sum += double(first_divergence(reference, candidate));
  similarity_sum += edit_similarity(reference, candidate);
  runs += 1;
  tokens = int(reference.size());
}

}  // namespace skim::eval
