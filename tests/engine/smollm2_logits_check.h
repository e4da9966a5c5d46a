// The SmolLM2 golden comparison the CPU test (tests/engine/smollm2_golden_test.cpp, fp32 bound)
// and the GPU test (tests/cuda/gpu_real_model_test.cpp, bf16 bound) share: prefill rows in
// full at the fixture's positions; then each decode step, teacher-forced along transformers'
// greedy tokens (so a near-tie cannot derail the rest), on the stored top-k ids and the
// log-sum-exp over the vocabulary; the greedy token wherever transformers' margin exceeds twice
// the bound.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "golden_fixture.h"
#include "model/config.h"
#include "skim/engine.h"

namespace skim::test {

struct LogitErrors {
  float prefill = 0, decode = 0;  // the largest |skim - transformers| of each part
};

inline float logsumexp(const float* x, int n) {
  const float m = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i] - m));
  return m + float(std::log(s));
}

// `o`: the engine's options but its context, which the case sets.
inline LogitErrors expect_golden_logits(const GoldenCase& c, EngineOptions o, float bound) {
  const auto prompt = c.meta["prompt_ids"].get<std::vector<int>>();
  const auto positions = c.meta["prefill_positions"].get<std::vector<int>>();
  const auto greedy = c.meta["greedy_ids"].get<std::vector<int>>();
  const auto margins = c.meta["greedy_margins"].get<std::vector<float>>();
  const int k = c.meta["decode_top_k"], n = int(prompt.size());
  o.max_context = n + int(greedy.size()) + 16;
  Engine engine(o);
  const int vocab = engine.config().vocab_size;
  EXPECT_EQ(vocab, 49152);

  std::vector<int> want = positions;
  want.push_back(n - 1);
  const int seq = engine.open_sequence();
  const std::vector<float> logits = engine.append(seq, prompt, want);
  LogitErrors e;
  const float* golden_prefill = c.rows<float>("prefill_logits");
  for (size_t i = 0; i < positions.size(); ++i) {
    float d = 0;
    for (int v = 0; v < vocab; ++v)
      d = std::max(d, std::fabs(logits[i * vocab + v] - golden_prefill[i * vocab + v]));
    e.prefill = std::max(e.prefill, d);
    EXPECT_LT(d, bound) << "prefill position " << positions[i];
  }
  const float* top_ids = c.rows<float>("decode_top_ids");  // token ids stored as F32 (exact)
  const float* top_logits = c.rows<float>("decode_top_logits");
  const float* lse = c.rows<float>("decode_lse");
  std::vector<float> step(logits.end() - vocab, logits.end());
  for (size_t i = 0; i < greedy.size(); ++i) {
    if (i > 0) {
      int s = seq, t = greedy[i - 1];
      step = engine.decode(std::span<const int>(&s, 1), std::span<const int>(&t, 1));
    }
    float d = std::fabs(logsumexp(step.data(), vocab) - lse[i]);
    for (int j = 0; j < k; ++j) d = std::max(d, std::fabs(step[int(top_ids[i * k + j])] - top_logits[i * k + j]));
    e.decode = std::max(e.decode, d);
    EXPECT_LT(d, bound) << "decode step " << i;
    if (margins[i] > 2 * bound) {
      EXPECT_EQ(int(std::max_element(step.begin(), step.end()) - step.begin()), greedy[i])
          << "greedy token at decode step " << i;
    }
  }
  return e;
}

}  // namespace skim::test
