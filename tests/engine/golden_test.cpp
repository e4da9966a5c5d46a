// skim's CPU forward pass against Hugging Face transformers (fp32 compute on the checkpoint's
// bf16 weights): prefill logits, 16 greedy decode steps with their logits, and for the demo
// model 64 greedy tokens through Engine::generate. Fixtures: tests/fixtures/golden/README.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "golden_fixture.h"
#include "model/safetensors.h"
#include "skim/engine.h"

namespace skim {
namespace {

const std::filesystem::path kRoot = SKIM_SOURCE_DIR;

using Golden = test::GoldenCase;
Golden load_golden(const std::string& name) { return test::load_golden_case(name); }

// fp32 on both sides, different summation orders: measured differences are about 1e-5 (4K
// tokens of the demo model), bf16 compute would be about 0.3. The bound is absolute on logits
// whose std is about 2.
constexpr float kLogitTol = 1e-4f;

float max_abs_diff(const float* a, const float* b, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

int argmax_of(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

class GoldenLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenLogits, PrefillAndGreedyDecodeMatchTransformers) {
  Golden g = load_golden(GetParam());
  std::vector<int> prompt = g.meta["prompt_ids"].get<std::vector<int>>();
  std::vector<int> positions = g.meta["prefill_positions"].get<std::vector<int>>();
  std::vector<int> greedy = g.meta["greedy_ids"].get<std::vector<int>>();
  const int n = int(prompt.size());

  EngineOptions o;
  o.model_dir = kRoot / g.meta["model_dir"].get<std::string>();
  o.max_context = n + int(greedy.size()) + 16;
  o.prefill_chunk = 256;  // the long prompt crosses chunk boundaries
  Engine engine(o);
  const int vocab = engine.config().vocab_size;

  std::vector<int> want = positions;
  want.push_back(n - 1);
  int seq = engine.open_sequence();
  std::vector<float> logits = engine.append(seq, prompt, want);
  float worst = 0;
  for (size_t i = 0; i < positions.size(); ++i) {
    float d = max_abs_diff(logits.data() + i * vocab, g.rows("prefill_logits") + i * vocab, vocab);
    worst = std::max(worst, d);
    EXPECT_LT(d, kLogitTol) << "prefill position " << positions[i];
  }

  const float* golden_decode = g.rows("decode_logits");
  const float* last = logits.data() + positions.size() * vocab;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const float* step = i == 0 ? last : nullptr;
    std::vector<float> out;
    if (i > 0) {
      int s = seq, t = greedy[i - 1];
      out = engine.decode(std::span<const int>(&s, 1), std::span<const int>(&t, 1));
      step = out.data();
    }
    float d = max_abs_diff(step, golden_decode + i * vocab, vocab);
    worst = std::max(worst, d);
    EXPECT_LT(d, kLogitTol) << "decode step " << i;
    EXPECT_EQ(argmax_of(step, vocab), greedy[i]) << "greedy token at decode step " << i;
  }
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
  std::printf("[ golden   ] %s: max |logit - transformers| = %.2e\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, GoldenLogits,
                         ::testing::Values("demo-short", "demo-medium", "demo-long", "tiny-llama3",
                                           "tiny-llama3-long", "tiny-mistral", "tiny-qwen2",
                                           "tiny-qwen3"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(GoldenGenerate, DemoGreedy64TokensMatchTransformers) {
  Golden g = load_golden("demo-short");
  EngineOptions o;
  o.model_dir = kRoot / "models/demo-code-28m";
  o.max_context = 256;
  Engine engine(o);
  GenerationRequest r;
  r.prompt_ids = g.meta["prompt_ids"].get<std::vector<int>>();
  r.max_tokens = 64;
  r.ignore_eos = true;
  auto results = engine.generate({r});
  EXPECT_EQ(results[0].tokens, g.meta["greedy64_ids"].get<std::vector<int>>());
  EXPECT_EQ(results[0].stats.finish_reason, "length");
}

// Top-1 minus top-2 logit.
float top2_margin(const float* x, int n) {
  std::vector<float> v(x, x + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

// The CPU path's 64 greedy tokens on the three demo prompts, with the top-2 margin of each
// step, kept as a fixture for the GPU path (tests/cuda/gpu_model_test.cpp), which must produce
// the same tokens wherever the choice is not a near-tie. demo-short's tokens are transformers'
// own (the test above). SKIM_WRITE_FIXTURES=1 rewrites the fixture.
TEST(GoldenGenerate, DemoGreedy64OnEveryDemoPromptMatchesTheFixture) {
  const auto path = kRoot / "tests/fixtures/golden/demo-greedy64.json";
  nlohmann::json got;
  for (const char* name : {"demo-short", "demo-medium", "demo-long"}) {
    Golden g = load_golden(name);
    GenerationRequest r;
    r.prompt_ids = g.meta["prompt_ids"].get<std::vector<int>>();
    r.max_tokens = 64;
    r.ignore_eos = true;
    EngineOptions o;
    o.model_dir = kRoot / "models/demo-code-28m";
    o.max_context = int(r.prompt_ids.size()) + 80;
    Engine engine(o);
    std::vector<int> tokens = engine.generate({r})[0].tokens;
    // The margins, teacher-forced along the generated tokens.
    const int vocab = engine.config().vocab_size;
    int seq = engine.open_sequence();
    const int last = int(r.prompt_ids.size()) - 1;
    std::vector<float> logits = engine.append(seq, r.prompt_ids, std::span<const int>(&last, 1));
    std::vector<float> margins = {top2_margin(logits.data(), vocab)};
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      logits = engine.decode(std::span<const int>(&seq, 1), std::span<const int>(&tokens[i], 1));
      margins.push_back(top2_margin(logits.data(), vocab));
    }
    got[name] = {{"tokens", tokens}, {"margins", margins}};
  }
  if (std::getenv("SKIM_WRITE_FIXTURES")) std::ofstream(path) << got.dump() << "\n";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " missing: run with SKIM_WRITE_FIXTURES=1";
  nlohmann::json want = nlohmann::json::parse(in);
  for (const char* name : {"demo-short", "demo-medium", "demo-long"}) {
    EXPECT_EQ(got[name]["tokens"], want[name]["tokens"]) << name;
    auto a = got[name]["margins"].get<std::vector<float>>(), b = want[name]["margins"].get<std::vector<float>>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3) << name << " step " << i;
  }
  EXPECT_EQ(got["demo-short"]["tokens"], load_golden("demo-short").meta["greedy64_ids"]);
}

}  // namespace
}  // namespace skim
