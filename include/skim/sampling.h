// Sampling and log-probabilities in skim's public API: what a request asks for (SamplingParams),
// the per-sequence sampler the engine draws with, and the log-probabilities it reports.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace skim {

// Next-token sampling: greedy at temperature 0, otherwise temperature, top-k and top-p
// (nucleus) over the softmax, from a seeded generator per sequence so runs repeat.
struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // 1: no limit
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {}
  int sample(std::span<const float> logits);

  const SamplingParams& params() const { return params_; }
  // The index of the next draw, for samplers outside this class (the GPU's draws one
  // counter-based random number per (seed, index)).
  uint64_t next_draw() { return draws_++; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  uint64_t draws_ = 0;
};

// A token's log-probability under its logits row (the log-softmax at temperature 1, as OpenAI
// reports them whatever the sampling temperature), and the most likely alternatives.
struct TokenLogprob {
  int token = -1;
  float logprob = 0;                       // log p(token)
  std::vector<std::pair<int, float>> top;  // the `top` most likely tokens, most likely first
};

}  // namespace skim
