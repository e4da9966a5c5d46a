// SmolLM2-135M-Instruct (the real pretrained checkpoint; 30 layers, head_dim 64, 9 query / 3 KV
// heads) on the GPU: against transformers' fp32 golden fixtures within a bf16 tolerance, and
// each GPU policy against the same policy on the CPU engine. Skips without a CUDA device, and
// without the model or a fixture (a GPU machine gets the model from scripts/device-model.sh:
// the bf16 rounding of the built fp32 weights, which are the weights the GPU holds from either).
//
// Tolerance: per case 1.25x transformers' own bf16-vs-fp32 logit difference on that prompt
// (tests/fixtures/golden/noise.json: 0.95-1.39 for SmolLM2, logits of std 7-8), the ratio the
// demo model's GPU golden test holds (0.5 against 0.40).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../engine/golden_fixture.h"
#include "../real_model.h"
#include "paged_decode_parity.h"
#include "model/config.h"
#include "skim/engine.h"

namespace skim {
namespace {

const std::filesystem::path kRoot = SKIM_SOURCE_DIR;

bool fixture_present(const std::string& name) {
  return std::filesystem::exists(kRoot / "tests/fixtures/golden" / name / "golden.safetensors");
}

float bf16_tolerance(const std::string& name) {
  std::ifstream in(kRoot / "tests/fixtures/golden/noise.json");
  return 1.25f * nlohmann::json::parse(in)["cases"][name]["max_abs_diff_bf16_vs_fp32"].get<float>();
}

// The model on this machine is the one the fixtures were made with, or its bf16 rounding.
void expect_fixture_model(const test::GoldenCase& c) {
  std::ifstream in(test::smollm2_dir() / "manifest.json");
  const auto m = nlohmann::json::parse(in);
  const std::string want = c.meta["model_safetensors_sha256"];
  const bool same = m["files"]["model.safetensors"]["sha256"] == want;
  const bool rounded = m.contains("bf16_of") && m["bf16_of"]["model.safetensors"] == want;
  ASSERT_TRUE(same || rounded) << test::smollm2_dir() << " is not the model of the fixtures (nor its bf16 rounding)";
}

EngineOptions smollm2_options(int max_context, const std::string& device) {
  EngineOptions o;
  o.model_dir = test::smollm2_dir();
  o.device = device;
  o.max_context = max_context;
  o.prefill_chunk = 512;
  return o;
}

#define SKIM_REQUIRE_GPU_AND_SMOLLM2(fixture)                                               \
  do {                                                                                      \
    if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";                     \
    if (!test::smollm2_present()) GTEST_SKIP() << test::smollm2_dir() << " is missing";     \
    if (!fixture_present(fixture)) GTEST_SKIP() << "fixture " << (fixture) << " is missing"; \
  } while (0)

float logsumexp(const float* x, int n) {
  const float m = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i] - m));
  return m + float(std::log(s));
}

class GpuSmolLM2Golden : public ::testing::TestWithParam<std::string> {};

// Prefill rows in full; each decode step teacher-forced along transformers' greedy tokens, on
// the stored top-k ids and the log-sum-exp; the greedy token where transformers' margin exceeds
// the tolerance.
TEST_P(GpuSmolLM2Golden, LogitsMatchTransformersWithinBf16) {
  SKIM_REQUIRE_GPU_AND_SMOLLM2(GetParam());
  const test::GoldenCase c = test::load_golden_case(GetParam());
  expect_fixture_model(c);
  const float tol = bf16_tolerance(GetParam());
  const auto prompt = c.meta["prompt_ids"].get<std::vector<int>>();
  const auto positions = c.meta["prefill_positions"].get<std::vector<int>>();
  const auto greedy = c.meta["greedy_ids"].get<std::vector<int>>();
  const auto margins = c.meta["greedy_margins"].get<std::vector<float>>();
  const int k = c.meta["decode_top_k"], n = int(prompt.size());

  Engine engine(smollm2_options(n + int(greedy.size()) + 16, "cuda"));
  const int vocab = engine.config().vocab_size;
  std::vector<int> want = positions;
  want.push_back(n - 1);
  const int seq = engine.open_sequence();
  const std::vector<float> logits = engine.append(seq, prompt, want);
  float worst = 0;
  const float* golden = c.rows("prefill_logits");
  for (size_t i = 0; i < positions.size(); ++i) {
    float d = 0;
    for (int v = 0; v < vocab; ++v) d = std::max(d, std::fabs(logits[i * vocab + v] - golden[i * vocab + v]));
    worst = std::max(worst, d);
    EXPECT_LT(d, tol) << "prefill position " << positions[i];
  }
  const float* top_ids = c.rows("decode_top_ids");
  const float* top_logits = c.rows("decode_top_logits");
  const float* lse = c.rows("decode_lse");
  std::vector<float> step(logits.end() - vocab, logits.end());
  for (size_t i = 0; i < greedy.size(); ++i) {
    if (i > 0) {
      int s = seq, t = greedy[i - 1];
      step = engine.decode(std::span<const int>(&s, 1), std::span<const int>(&t, 1));
    }
    float d = std::fabs(logsumexp(step.data(), vocab) - lse[i]);
    for (int j = 0; j < k; ++j) d = std::max(d, std::fabs(step[int(top_ids[i * k + j])] - top_logits[i * k + j]));
    worst = std::max(worst, d);
    EXPECT_LT(d, tol) << "decode step " << i;
    if (margins[i] > 2 * tol) {
      EXPECT_EQ(int(std::max_element(step.begin(), step.end()) - step.begin()), greedy[i]) << "step " << i;
    }
  }
  std::printf("[ golden   ] %s on the GPU: max |logit - transformers| = %.3f (tolerance %.3f)\n",
              GetParam().c_str(), worst, tol);
}

INSTANTIATE_TEST_SUITE_P(Prompts, GpuSmolLM2Golden, ::testing::Values("smollm2-chat", "smollm2-prose", "smollm2-long"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

class GpuSmolLM2Policy : public ::testing::TestWithParam<std::string> {};

// Each GPU policy against the same policy on the CPU engine, teacher-forced for 16 steps after
// the 2.5K-token smollm2-long prompt: within the bf16 tolerance, visibly apart from dense
// attention on the GPU (the selection acts), and reading less than dense.
TEST_P(GpuSmolLM2Policy, DecodeMatchesTheCpuPolicy) {
  SKIM_REQUIRE_GPU_AND_SMOLLM2("smollm2-long");
  const test::GoldenCase c = test::load_golden_case("smollm2-long");
  const float tol = bf16_tolerance("smollm2-long");
  const auto prompt = c.meta["prompt_ids"].get<std::vector<int>>();
  const auto forced = c.meta["greedy_ids"].get<std::vector<int>>();
  const int ctx = int(prompt.size()) + 64;
  EngineOptions cpu_opt = smollm2_options(ctx, "cpu"), gpu_opt = smollm2_options(ctx, "cuda");
  cpu_opt.policy = gpu_opt.policy = GetParam();
  Engine cpu(cpu_opt), gpu(gpu_opt), gpu_dense(smollm2_options(ctx, "cuda"));
  const int vocab = cpu.config().vocab_size;
  const std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
  int sc = cpu.open_sequence(), sg = gpu.open_sequence(), sd = gpu_dense.open_sequence();
  cpu.append(sc, prefix, {});
  gpu.append(sg, prefix, {});
  gpu_dense.append(sd, prefix, {});
  float worst = 0, from_dense = 0;
  for (size_t i = 0; i < 16; ++i) {
    const int t = i == 0 ? prompt.back() : forced[i - 1];
    const std::vector<float> a = cpu.decode(std::span<const int>(&sc, 1), std::span<const int>(&t, 1));
    const std::vector<float> g = gpu.decode(std::span<const int>(&sg, 1), std::span<const int>(&t, 1));
    const std::vector<float> d = gpu_dense.decode(std::span<const int>(&sd, 1), std::span<const int>(&t, 1));
    for (int v = 0; v < vocab; ++v) {
      worst = std::max(worst, std::fabs(a[size_t(v)] - g[size_t(v)]));
      from_dense = std::max(from_dense, std::fabs(g[size_t(v)] - d[size_t(v)]));
    }
  }
  std::printf("[ sparse   ] %s, smollm2-long, 16 steps: max |GPU - CPU| = %.3f (tolerance %.3f), max |policy - dense| "
              "on the GPU = %.3f\n",
              GetParam().c_str(), worst, tol, from_dense);
  EXPECT_LT(worst, tol);
  EXPECT_GT(from_dense, 0.01f) << "the selection changed nothing: is it running?";
  EXPECT_LT(gpu.decode_kv_bytes_read(), 0.5 * gpu_dense.decode_kv_bytes_read());
}

INSTANTIATE_TEST_SUITE_P(Policies, GpuSmolLM2Policy,
                         ::testing::Values("gbsa:keep=0.1,n_min=16", "quest:budget=0.1,min=0",
                                           "streaming:sink=4,window=512",
                                           "gbsa:keep=0.3,n_min=16+art:round=16,patience=100000",
                                           "quest:budget=0.1,min=0+art:round=16,patience=100000"),
                         [](const auto& info) {
                           const std::string& p = info.param;
                           return p.substr(0, p.find(':')) + (p.find("+art") != std::string::npos ? "_art" : "");
                         });

}  // namespace
}  // namespace skim
