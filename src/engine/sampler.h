// Next-token sampling: greedy at temperature 0, otherwise temperature, top-k and top-p
// (nucleus) over the softmax, from a seeded generator per sequence so runs repeat.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace skim {

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

int argmax(std::span<const float> logits);

}  // namespace skim
