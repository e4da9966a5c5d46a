// What the engine tests on the tiny checkpoint (tests/fixtures/models/tiny-llama3: 2 layers,
// vocab 512) share: an engine, random prompts, teacher-forced decode steps, logit distances.
#pragma once

#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../test_random.h"
#include "skim/engine.h"

namespace skim::test {

inline const std::filesystem::path kTinyModel =
    std::filesystem::path(SKIM_SOURCE_DIR) / "tests/fixtures/models/tiny-llama3";

inline std::unique_ptr<Engine> make_tiny_engine(const std::string& policy, int context, int sequences = 1) {
  EngineOptions o;
  o.model_dir = kTinyModel;
  o.policy = policy;
  o.max_context = context;
  o.max_sequences = sequences;
  o.prefill_chunk = 64;
  return std::make_unique<Engine>(o);
}

inline std::vector<int> random_ids(int n, int lo = 0, int hi = 511) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int& x : v) x = random_int(lo, hi);
  return v;
}

// Logits of each decode step of `tokens` fed one by one to `seq` (teacher forcing).
inline std::vector<std::vector<float>> decode_each(Engine& e, int seq, const std::vector<int>& tokens) {
  std::vector<std::vector<float>> out;
  for (int t : tokens) out.push_back(e.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1)));
  return out;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace skim::test
