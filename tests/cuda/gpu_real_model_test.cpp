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
#include "../engine/smollm2_logits_check.h"
#include "../real_model.h"
#include "paged_decode_parity.h"
#include "policy_against_cpu.h"
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
  o.dense_fallback = false;  // the policies select at every step, as on the CPU they are compared with
  return o;
}

#define SKIM_REQUIRE_GPU_AND_SMOLLM2(fixture)                                               \
  do {                                                                                      \
    if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";                     \
    if (!test::smollm2_present()) GTEST_SKIP() << test::smollm2_dir() << " is missing";     \
    if (!fixture_present(fixture)) GTEST_SKIP() << "fixture " << (fixture) << " is missing"; \
  } while (0)


class GpuSmolLM2Golden : public ::testing::TestWithParam<std::string> {};

// The CPU golden test's comparison (smollm2_logits_check.h) at the bf16 bound.
TEST_P(GpuSmolLM2Golden, LogitsMatchTransformersWithinBf16) {
  SKIM_REQUIRE_GPU_AND_SMOLLM2(GetParam());
  const test::GoldenCase c = test::load_golden_case(GetParam());
  expect_fixture_model(c);
  const float tol = bf16_tolerance(GetParam());
  const test::LogitErrors e = test::expect_golden_logits(c, smollm2_options(0, "cuda"), tol);
  std::printf("[ golden   ] %s on the GPU: max |logit - transformers| prefill %.3f, decode %.3f (tolerance %.3f)\n",
              GetParam().c_str(), e.prefill, e.decode, tol);
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
  const test::PolicyAgainstCpu r =
      test::decode_policy_against_cpu(cpu_opt, gpu_opt, smollm2_options(ctx, "cuda"), prompt, forced);
  std::printf("[ sparse   ] %s, smollm2-long, 16 steps: max |GPU - CPU| = %.3f (tolerance %.3f), max |policy - dense| "
              "on the GPU = %.3f\n",
              GetParam().c_str(), r.worst, tol, r.from_dense);
  EXPECT_LT(r.worst, tol);
  EXPECT_GT(r.from_dense, 0.01f) << "the selection changed nothing: is it running?";
  EXPECT_LT(r.kv_bytes, 0.5 * r.dense_kv_bytes);
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
