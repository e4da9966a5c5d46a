#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace skim {

int argmax(std::span<const float> logits) {
  return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int Sampler::sample(std::span<const float> logits) {
  if (params_.temperature <= 0.0f) return argmax(logits);
  const int n = int(logits.size());
  std::vector<int> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  // Candidates in descending logit order; top-k cuts the list before the softmax.
  int k = params_.top_k > 0 ? std::min(params_.top_k, n) : n;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  ids.resize(size_t(k));
  std::vector<double> p(static_cast<size_t>(k));
  const double inv_t = 1.0 / params_.temperature, top = logits[ids[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[ids[i]] - top) * inv_t);
  // Nucleus: the smallest prefix whose mass reaches top_p (at least one token).
  int keep = k;
  if (params_.top_p < 1.0f) {
    double acc = 0;
    for (int i = 0; i < k; ++i) {
      acc += p[i] / sum;
      if (acc >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<int> pick(p.begin(), p.begin() + keep);
  return ids[size_t(pick(rng_))];
}

}  // namespace skim
