// A GPU policy against the same policy on the CPU engine, and against dense attention on the
// GPU, teacher-forced after a prompt: what the GPU policy tests of the demo model
// (gpu_model_test.cpp) and of SmolLM2 (gpu_real_model_test.cpp) measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "model/config.h"
#include "skim/engine.h"

namespace skim::test {

struct PolicyAgainstCpu {
  float worst = 0;       // max |GPU - CPU| logit, same policy
  float from_dense = 0;  // max |policy - dense| logit on the GPU: that the selection acts
  double kv_bytes = 0, dense_kv_bytes = 0;  // decode KV bytes read on the GPU
};

// The options name each engine's device and policy; prompt[:-1] is prefilled, then `steps`
// decode steps feed the prompt's last token and then forced[0..].
inline PolicyAgainstCpu decode_policy_against_cpu(const EngineOptions& cpu_opt, const EngineOptions& gpu_opt,
                                                  const EngineOptions& dense_opt, const std::vector<int>& prompt,
                                                  const std::vector<int>& forced, int steps = 16) {
  Engine cpu(cpu_opt), gpu(gpu_opt), dense(dense_opt);
  const int vocab = cpu.config().vocab_size;
  const std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
  int sc = cpu.open_sequence(), sg = gpu.open_sequence(), sd = dense.open_sequence();
  cpu.append(sc, prefix, {});
  gpu.append(sg, prefix, {});
  dense.append(sd, prefix, {});
  PolicyAgainstCpu r;
  for (int i = 0; i < steps; ++i) {
    const int t = i == 0 ? prompt.back() : forced[size_t(i - 1)];
    const std::vector<float> c = cpu.decode(std::span<const int>(&sc, 1), std::span<const int>(&t, 1));
    const std::vector<float> g = gpu.decode(std::span<const int>(&sg, 1), std::span<const int>(&t, 1));
    const std::vector<float> d = dense.decode(std::span<const int>(&sd, 1), std::span<const int>(&t, 1));
    for (int v = 0; v < vocab; ++v) {
      r.worst = std::max(r.worst, std::fabs(c[size_t(v)] - g[size_t(v)]));
      r.from_dense = std::max(r.from_dense, std::fabs(g[size_t(v)] - d[size_t(v)]));
    }
  }
  r.kv_bytes = gpu.decode_kv_bytes_read();
  r.dense_kv_bytes = dense.decode_kv_bytes_read();
  return r;
}

}  // namespace skim::test
