// The demo model on the GPU (Engine with device "cuda") against the golden fixtures:
// transformers' fp32 logits within a bf16 tolerance, and greedy generation identical to the
// CPU path (fixture tests/fixtures/golden/demo-greedy64.json, which the CPU golden test keeps
// true) for 64 tokens on the three demo prompts. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cuda/art_decode_attention.cuh"
#include "core/error.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "demo_long_case.h"
#include "paged_decode_parity.h"
#include "policy_against_cpu.h"
#include "engine/scheduler.h"
#include "skim/engine.h"

namespace skim {
namespace {

const std::filesystem::path kRoot = SKIM_SOURCE_DIR;

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// bf16 weights, activations rounded to bf16 before each projection, bf16 K/V and queries:
// logits move by a few tenths at most on logits whose std is about 2 (measured worst in the
// test output); a greedy choice may flip only where transformers' top-2 margin is smaller.
constexpr float kLogitTol = 0.5f;
constexpr float kMarginForArgmax = 0.5f;

EngineOptions gpu_options(int max_context) {
  EngineOptions o;
  o.model_dir = kRoot / "models/demo-code-28m";
  o.device = "cuda";
  o.max_context = max_context;
  o.prefill_chunk = 256;
  o.dense_fallback = false;  // the policies select at every step, as on the CPU they are compared with
  return o;
}

class GpuGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(GpuGolden, LogitsMatchTransformersWithinBf16) {
  auto dir = kRoot / "tests/fixtures/golden" / GetParam();
  nlohmann::json meta = read_json(dir / "golden.json");
  SafetensorsFile tensors(dir / "golden.safetensors");
  auto rows = [&](const char* name) { return static_cast<const float*>(tensors.tensors().at(name).data); };
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<int> positions = meta["prefill_positions"].get<std::vector<int>>();
  std::vector<int> greedy = meta["greedy_ids"].get<std::vector<int>>();
  std::vector<float> margins = meta["greedy_margins"].get<std::vector<float>>();

  Engine engine(gpu_options(int(prompt.size() + greedy.size()) + 16));
  const int vocab = engine.config().vocab_size;
  int seq = engine.open_sequence();
  std::vector<float> logits = engine.append(seq, prompt, positions);
  float worst = 0;
  auto diff = [&](const float* a, const float* b) {
    float m = 0;
    for (int i = 0; i < vocab; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    worst = std::max(worst, m);
    return m;
  };
  for (size_t i = 0; i < positions.size(); ++i)
    EXPECT_LT(diff(logits.data() + i * vocab, rows("prefill_logits") + i * vocab), kLogitTol)
        << "prefill position " << positions[i];

  // Decode: transformers' greedy tokens fed back (teacher forcing), logits compared each step.
  engine.close_sequence(seq);
  seq = engine.open_sequence();
  std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
  engine.append(seq, prefix, {});
  for (size_t i = 0; i < greedy.size(); ++i) {
    int t = i == 0 ? prompt.back() : greedy[i - 1];
    std::vector<float> out = engine.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1));
    EXPECT_LT(diff(out.data(), rows("decode_logits") + i * vocab), kLogitTol) << "decode step " << i;
    if (margins[i] > kMarginForArgmax) {
      EXPECT_EQ(int(std::max_element(out.begin(), out.end()) - out.begin()), greedy[i]) << "step " << i;
    }
  }
  std::printf("[ golden   ] %s on the GPU: max |logit - transformers| = %.3f\n", GetParam().c_str(), worst);
}

// Identical tokens, except that once the CPU path's choice was a near-tie (top-2 margin under
// the logit tolerance) the GPU may take the other branch, after which the texts differ.
TEST_P(GpuGolden, Greedy64TokensMatchTheCpuPath) {
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden" / GetParam() / "golden.json");
  nlohmann::json cpu = read_json(kRoot / "tests/fixtures/golden/demo-greedy64.json")[GetParam()];
  std::vector<int> want = cpu["tokens"].get<std::vector<int>>();
  std::vector<float> margins = cpu["margins"].get<std::vector<float>>();
  GenerationRequest r;
  r.prompt_ids = meta["prompt_ids"].get<std::vector<int>>();
  r.max_tokens = 64;
  r.ignore_eos = true;
  Engine engine(gpu_options(int(r.prompt_ids.size()) + 80));
  std::vector<int> got = engine.generate({r})[0].tokens;
  ASSERT_EQ(got.size(), want.size());
  size_t i = 0;
  while (i < got.size() && got[i] == want[i]) ++i;
  if (i == got.size()) {
    std::printf("[ greedy   ] %s: GPU = CPU for all %zu tokens\n", GetParam().c_str(), got.size());
  } else {
    std::printf("[ greedy   ] %s: GPU = CPU for %zu tokens, then a near-tie (CPU margin %.4f)\n",
                GetParam().c_str(), i, margins[i]);
    EXPECT_LT(margins[i], kLogitTol) << "the GPU's greedy token differs at step " << i
                                     << " where the CPU path's choice was clear";
  }
}

INSTANTIATE_TEST_SUITE_P(DemoPrompts, GpuGolden, ::testing::Values("demo-short", "demo-medium", "demo-long"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(GpuEngine, SampledGenerationRepeatsWithItsSeed) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  Engine engine(gpu_options(256));
  auto run = [&](uint64_t seed) {
    GenerationRequest r;
    r.prompt = "def main():\n";
    r.max_tokens = 48;
    r.ignore_eos = true;
    r.sampling = {0.9f, 40, 0.95f, seed};
    return engine.generate({r})[0].tokens;
  };
  std::vector<int> a = run(7), b = run(7), c = run(8);
  EXPECT_EQ(a.size(), 48u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// Log-probabilities on the GPU (computed on the device after sampling): every generated token's
// and the prompt's, greedy's token the most likely, and close to the CPU engine's (bf16 logits
// within kLogitTol of fp32 move a log-probability by about as much).
TEST(GpuEngine, LogprobsFollowTheCpuEngine) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  GenerationRequest r;
  r.prompt = "def fibonacci(n):";
  r.max_tokens = 16;
  r.ignore_eos = true;
  r.logprobs = 5;
  r.echo_logprobs = true;
  Engine gpu(gpu_options(256));
  EngineOptions co = gpu_options(256);
  co.device = "cpu";
  Engine cpu(co);
  const GenerationResult g = gpu.generate({r})[0], c = cpu.generate({r})[0];
  ASSERT_EQ(g.logprobs.size(), g.tokens.size());
  ASSERT_EQ(g.prompt_logprobs.size(), c.prompt_logprobs.size());
  float worst = 0;
  bool same = true;  // the two generations agree so far: the logprobs are of the same context
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    const TokenLogprob& lp = g.logprobs[i];
    EXPECT_EQ(lp.token, g.tokens[i]);
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].first, lp.token) << "greedy takes the most likely token";
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    same = same && i < c.tokens.size() && c.tokens[i] == g.tokens[i];
    if (same) worst = std::max(worst, std::fabs(lp.logprob - c.logprobs[i].logprob));
  }
  for (size_t i = 0; i < g.prompt_logprobs.size(); ++i)
    worst = std::max(worst, std::fabs(g.prompt_logprobs[i].logprob - c.prompt_logprobs[i].logprob));
  std::printf("[ logprobs ] GPU vs CPU engine: max |logprob diff| = %.3g\n", worst);
  EXPECT_LT(worst, kLogitTol);
}

// fork_sequence and truncate_sequence on the GPU (the prefix cache's operations): a fork's
// pages are byte copies, so its decode step gives the source's logits bit for bit; a sequence
// cut back to a chunk boundary and prefilled again gives the logits of a fresh prefill.
TEST(GpuEngine, ForkAndTruncateKeepTheSequence) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-medium/golden.json");
  const std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  EngineOptions o = gpu_options(int(prompt.size()) + 16);
  o.max_sequences = 3;
  o.prefill_chunk = 64;  // the 300-token prompt spans four chunks and a part
  Engine engine(o);
  const int chunk = engine.prefill_chunk(), last = int(prompt.size()) - 1;
  ASSERT_GT(int(prompt.size()), 2 * chunk) << "the prompt must span more than two chunks";

  const int a = engine.open_sequence();
  const std::vector<float> fresh = engine.append(a, prompt, std::vector<int>{last});
  const int b = engine.fork_sequence(a);
  EXPECT_EQ(engine.sequence_length(b), int(prompt.size()));
  const int next = 42;
  const std::vector<float> from_a = engine.decode(std::vector<int>{a}, std::vector<int>{next});
  const std::vector<float> from_b = engine.decode(std::vector<int>{b}, std::vector<int>{next});
  EXPECT_EQ(from_a, from_b) << "a fork decodes exactly as its source";

  const int c = engine.fork_sequence(a);
  engine.truncate_sequence(c, 2 * chunk);
  const std::vector<int> rest(prompt.begin() + 2 * chunk, prompt.end());
  const std::vector<float> again = engine.append(c, rest, std::vector<int>{int(rest.size()) - 1});
  float worst = 0;
  for (size_t v = 0; v < fresh.size(); ++v) worst = std::max(worst, std::fabs(fresh[v] - again[v]));
  std::printf("[ fork     ] demo-medium cut to %d tokens and prefilled again: max |logit - fresh| = %.3g\n",
              2 * chunk, worst);
  EXPECT_LT(worst, 1e-3f);
  EXPECT_EQ(std::max_element(fresh.begin(), fresh.end()) - fresh.begin(),
            std::max_element(again.begin(), again.end()) - again.begin());
  EXPECT_THROW(engine.truncate_sequence(c, 2 * chunk + 1), Error) << "a cut inside a page";
}

// A sparse policy on the GPU (its planner's selection kernel + decode attention over the
// plan) against the same policy on the CPU on the 4K demo prompt, teacher-forced: the logits
// of every step within the bf16 tolerance of the dense comparison (the selections may differ
// only at near-ties of the page bound), and visibly apart from dense attention's, so that
// the selection really acts. gbsa: group_page_select; quest: quest_page_select and the
// decode kernel's per-head page masks; streaming: window_page_plan (the same whole pages).
class GpuSparsePolicy : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuSparsePolicy, DecodeMatchesTheCpuPolicy) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-long/golden.json");
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<int> forced = meta["greedy_ids"].get<std::vector<int>>();
  const std::string policy = GetParam();
  EngineOptions cpu_opt = gpu_options(int(prompt.size()) + 64), gpu_opt = cpu_opt;
  cpu_opt.device = "cpu";
  cpu_opt.policy = gpu_opt.policy = policy;
  const test::PolicyAgainstCpu r =
      test::decode_policy_against_cpu(cpu_opt, gpu_opt, gpu_options(int(prompt.size()) + 64), prompt, forced);
  std::printf("[ sparse   ] %s, demo-long, 16 steps: max |GPU - CPU| = %.3f, max |policy - dense| on the GPU = %.3f\n",
              policy.c_str(), r.worst, r.from_dense);
  EXPECT_LT(r.worst, kLogitTol);
  EXPECT_GT(r.from_dense, 0.01f) << "the selection changed nothing: is it running?";
  EXPECT_LT(r.kv_bytes, 0.5 * r.dense_kv_bytes);
}

// The paper's sparsities with few pages forced (the SmolLM2 defaults keep 3K tokens of any
// context, most of this prompt); quest in every layer too.
INSTANTIATE_TEST_SUITE_P(Policies, GpuSparsePolicy,
                         ::testing::Values("gbsa:keep=0.1,n_min=16", "quest:budget=0.1,min=0",
                                           "quest:budget=0.1,min=0,dense_layers=0", "streaming:sink=4,window=512",
                                           // ART whose patience outlasts the list: its base, read in bound order
                                           "gbsa:keep=0.3,n_min=16+art:stop=group,test=probe,round=16,patience=100000",
                                           "quest:budget=0.1,min=0+art:stop=group,test=probe,round=16,patience=100000",
                                           "streaming:sink=4,window=512+art:stop=group,test=probe,round=16,patience=100000"),
                         [](const auto& info) {
                           const std::string& p = info.param;
                           return p.substr(0, p.find(':')) + (p.find("dense_layers=0") != std::string::npos ? "_all_layers" : "") +
                                  (p.find("+art") != std::string::npos ? "_art" : "");
                         });

// cs on the GPU, searching every step and every third (a search period: between searches the
// last picks plus every key since): one centroid per subspace, so that both backends' k-means land
// on the same centroid (the normalised mean of every prompt query: points above the prompt's
// vectors, no sampling on either), hence the same lists up to near-ties of bf16 against fp32
// queries.
INSTANTIATE_TEST_SUITE_P(Cs, GpuSparsePolicy,
                         ::testing::Values("cs:centroids=1,backoff_top=1,iters=2,points=65536,keep=0.2,list=0.5,window=64",
                                           "cs:centroids=1,backoff_top=1,iters=2,points=65536,keep=0.2,list=0.5,window=64,"
                                           "step=3"),
                         [](const auto& info) {
                           return std::string(info.param.find("step=") != std::string::npos ? "cs_step3" : "cs");
                         });

// ReSA on the GPU: group-sparse decode steps, and every f steps the engine re-runs the last f
// tokens as a dense prefill on the GPU (rewriting their K/V and digests). Teacher-forced on the
// demo-long prompt with f = 4: the logits follow the CPU policy's, rectification ran as often,
// and it changed the cache (the logits leave gbsa's).
TEST(GpuEngine, ResaRectifiesOnTheGpuAsOnTheCpu) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-long/golden.json");
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<int> forced = meta["greedy_ids"].get<std::vector<int>>();
  const int steps = 16;
  auto run = [&](const std::string& policy, const std::string& device, uint64_t* rectified) {
    EngineOptions o = gpu_options(int(prompt.size()) + 64);
    o.device = device;
    o.policy = policy;
    Engine e(o);
    int seq = e.open_sequence();
    e.append(seq, std::vector<int>(prompt.begin(), prompt.end() - 1), {});
    std::vector<std::vector<float>> out;
    for (int i = 0; i < steps; ++i) {
      const int t = i == 0 ? prompt.back() : forced[size_t(i - 1)];
      out.push_back(e.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1)));
    }
    if (rectified) *rectified = e.rectified_tokens();
    return out;
  };
  uint64_t rect_cpu = 0, rect_gpu = 0;
  auto cpu = run("resa:keep=0.1,n_min=16,f=4", "cpu", &rect_cpu);
  auto gpu = run("resa:keep=0.1,n_min=16,f=4", "cuda", &rect_gpu);
  auto gbsa = run("gbsa:keep=0.1,n_min=16", "cuda", nullptr);
  float worst = 0, from_gbsa = 0;
  for (int i = 0; i < steps; ++i)
    for (size_t v = 0; v < gpu[size_t(i)].size(); ++v) {
      worst = std::max(worst, std::fabs(cpu[size_t(i)][v] - gpu[size_t(i)][v]));
      from_gbsa = std::max(from_gbsa, std::fabs(gbsa[size_t(i)][v] - gpu[size_t(i)][v]));
    }
  std::printf("[ resa     ] demo-long, %d steps, f=4: max |GPU - CPU| = %.3f, max |resa - gbsa| on the GPU = %.3f, "
              "rectified %llu tokens\n",
              steps, worst, from_gbsa, (unsigned long long)rect_gpu);
  EXPECT_LT(worst, kLogitTol);
  EXPECT_EQ(rect_gpu, uint64_t(steps));
  EXPECT_EQ(rect_cpu, rect_gpu);
  EXPECT_GT(from_gbsa, 0.01f) << "rectification changed nothing: is it running?";
}

// ReSA with several sequences due in the same step: their rectifications share one prefill pass
// (paged prefill attention over several sequences). Three sequences of different prompt lengths
// decode together, teacher-forced, and each row's logits follow the same sequence decoded alone
// (another batch size: the GEMMs may round differently); every sequence rectified.
TEST(GpuEngine, ResaRectifiesSequencesDueTogetherInOnePass) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-long/golden.json");
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<int> forced = meta["greedy_ids"].get<std::vector<int>>();
  const std::string policy = "resa:keep=0.1,n_min=16,f=4";
  const int steps = 12, n = 3;
  const std::vector<int> cut = {0, 150, 333};  // prompt tokens each sequence leaves out
  auto prefix = [&](int r) { return std::vector<int>(prompt.begin(), prompt.end() - 1 - cut[size_t(r)]); };
  auto token = [&](int i) { return i == 0 ? prompt.back() : forced[size_t(i - 1)]; };

  EngineOptions o = gpu_options(int(prompt.size()) + 64);
  o.max_sequences = n;
  o.policy = policy;
  Engine together(o);
  std::vector<int> seqs;
  for (int r = 0; r < n; ++r) {
    seqs.push_back(together.open_sequence());
    together.append(seqs.back(), prefix(r), {});
  }
  std::vector<std::vector<float>> rows;  // [step] n rows of logits
  for (int i = 0; i < steps; ++i) rows.push_back(together.decode(seqs, std::vector<int>(size_t(n), token(i))));
  EXPECT_EQ(together.rectified_tokens(), uint64_t(n * steps));

  const size_t vocab = size_t(together.config().vocab_size);
  for (int r = 0; r < n; ++r) {
    EngineOptions a = gpu_options(int(prompt.size()) + 64);
    a.policy = policy;
    Engine alone(a);
    const int seq = alone.open_sequence();
    alone.append(seq, prefix(r), {});
    float worst = 0;
    for (int i = 0; i < steps; ++i) {
      const int t = token(i);
      const std::vector<float> l = alone.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1));
      for (size_t v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs(l[v] - rows[size_t(i)][size_t(r) * vocab + v]));
    }
    std::printf("[ resa     ] sequence %d of %d rectified together vs alone, %d steps: max |diff| = %.3g\n", r, n,
                steps, worst);
    EXPECT_LT(worst, kLogitTol);
    EXPECT_EQ(alone.rectified_tokens(), uint64_t(steps));
  }
}

// Per-sequence policies in one batch: four forks of the demo-long prompt decode together under
// dense, gbsa, quest and resa (f = 4), and a fifth sequence prefilled under cs (its tables need
// its own prompt's queries) as the last row (the forward moves cs rows first and the logits back),
// teacher-forced, and each row's logits follow the same policy run alone (another batch size:
// the GEMMs and the attention's splits may round differently, and a near-tie of a page bound
// may flip); resa rectifies its row only; the bytes are the sum of the rows' policies'. The rows
// really differ (not all dense). A second cs policy or cs beside mac is refused.
TEST(GpuEngine, MixedPolicyBatchMatchesEachPolicyAlone) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-long/golden.json");
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<int> forced = meta["greedy_ids"].get<std::vector<int>>();
  const std::string cs = "cs:centroids=1,backoff_top=1,iters=2,points=65536,keep=0.2,list=0.5,window=64";
  const std::vector<std::string> policies = {"dense", "gbsa:keep=0.1,n_min=16", "quest:budget=0.1,min=0",
                                             "resa:keep=0.1,n_min=16,f=4", cs};
  const int steps = 12, n = int(policies.size());
  const std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
  auto token = [&](int i) { return i == 0 ? prompt.back() : forced[size_t(i - 1)]; };

  EngineOptions o = gpu_options(int(prompt.size()) + 64);
  o.max_sequences = n;
  Engine mixed(o);
  ASSERT_TRUE(mixed.mixes_policies());
  std::vector<int> seqs{mixed.open_sequence()};
  mixed.append(seqs[0], prefix, {});
  for (int i = 1; i < n - 1; ++i) seqs.push_back(mixed.fork_sequence(seqs[0]));
  for (int i = 0; i < n - 1; ++i) mixed.set_sequence_policy(seqs[size_t(i)], policies[size_t(i)]);
  seqs.push_back(mixed.open_sequence());
  mixed.set_sequence_policy(seqs.back(), cs);
  mixed.append(seqs.back(), prefix, {});
  EXPECT_THROW(mixed.set_sequence_policy(seqs[0], "cs:keep=0.1"), Error) << "one cs policy at a time";
  EXPECT_THROW(mixed.set_sequence_policy(seqs[0], "mac"), Error) << "mac beside cs";
  EXPECT_EQ(mixed.sequence_policy(seqs[0]), "dense");
  std::vector<std::vector<float>> together;  // [step] n rows of logits
  for (int i = 0; i < steps; ++i) together.push_back(mixed.decode(seqs, std::vector<int>(size_t(n), token(i))));

  const size_t vocab = size_t(mixed.config().vocab_size);
  double alone_bytes = 0;
  std::vector<std::vector<float>> dense_alone;
  for (int r = 0; r < n; ++r) {
    EngineOptions a = gpu_options(int(prompt.size()) + 64);
    a.policy = policies[size_t(r)];
    Engine alone(a);
    const int seq = alone.open_sequence();
    alone.append(seq, prefix, {});
    float worst = 0, from_dense = 0;
    for (int i = 0; i < steps; ++i) {
      const int t = token(i);
      const std::vector<float> l = alone.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1));
      if (r == 0) dense_alone.push_back(l);
      for (size_t v = 0; v < vocab; ++v) {
        worst = std::max(worst, std::fabs(l[v] - together[size_t(i)][size_t(r) * vocab + v]));
        from_dense = std::max(from_dense, std::fabs(l[v] - dense_alone[size_t(i)][v]));
      }
    }
    alone_bytes += alone.decode_kv_bytes_read();
    std::printf("[ mixed    ] %s in a batch of %d policies vs alone, %d steps: max |diff| = %.3g (from dense %.3g)\n",
                policies[size_t(r)].c_str(), n, steps, worst, from_dense);
    EXPECT_LT(worst, kLogitTol) << policies[size_t(r)];
    if (r > 0) {
      EXPECT_GT(from_dense, 0.01f) << policies[size_t(r)] << " ran as dense?";
    }
    if (r == 3) {
      EXPECT_EQ(alone.rectified_tokens(), uint64_t(steps));
    }
  }
  EXPECT_EQ(mixed.rectified_tokens(), uint64_t(steps)) << "only the resa row rectifies";
  // The batch of five runs its projections on the tensor-core GEMV, each sequence alone some of
  // them on the FMA one (ops.cuh kGemvMmaMinRows): another summation order, which can flip a near-tied page
  // of quest's union (counted on the device). 8192 bytes of 401.7 MB differed on an H100
  // (2026-11-27): one page's K and V of one KV head in one layer.
  EXPECT_NEAR(mixed.decode_kv_bytes_read(), alone_bytes, 1e-4 * alone_bytes);
}

// The dense fallback (EngineOptions::dense_fallback, on by default): at the demo prompt's length a
// selection leaves too few tokens unread to pay for its kernels, so gbsa's, quest's and cs's steps
// attend every key: the same logits as dense's, bit for bit, and dense's bytes (cs builds no
// tables); with the fallback off they select (the logits move).
TEST(GpuEngine, DenseFallbackAttendsEveryKeyWhereSelectionCannotPay) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const test::DemoLong d;
  struct Run {
    std::vector<std::vector<float>> logits;
    double bytes = 0;
  };
  auto run = [&](const std::string& policy, bool fallback) {
    EngineOptions o = gpu_options(int(d.prompt.size()) + 64);
    o.policy = policy;
    o.dense_fallback = fallback;
    Engine e(o);
    const int seq = e.open_sequence();
    e.append(seq, d.prefix, {});
    Run r;
    for (int i = 0; i < 6; ++i) {
      const int t = d.token(i);
      r.logits.push_back(e.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1)));
    }
    r.bytes = e.decode_kv_bytes_read();
    return r;
  };
  const Run dense = run("dense", true);
  for (const std::string policy : {"gbsa:keep=0.1,n_min=16", "quest:budget=0.1,min=0",
                                   "cs:centroids=1,backoff_top=1,iters=2,points=65536,keep=0.2,list=0.5,window=64"}) {
    const Run fell_back = run(policy, true), selected = run(policy, false);
    EXPECT_EQ(fell_back.logits, dense.logits) << policy;
    EXPECT_DOUBLE_EQ(fell_back.bytes, dense.bytes) << policy;
    EXPECT_NE(selected.logits, dense.logits) << policy << " with the fallback off ran as dense?";
    EXPECT_LT(selected.bytes, dense.bytes) << policy;
  }
}

// The server's scheduler on the GPU admits requests of different policies into one running
// batch: no switch, no waiting for the batch to drain.
TEST(GpuEngine, SchedulerRunsRequestsOfSeveralPoliciesTogether) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  EngineOptions o = gpu_options(1024);
  o.max_sequences = 3;
  Engine engine(o);
  Scheduler scheduler(engine, SchedulerOptions{.worker = false});
  int done = 0, failed = 0, most_running = 0;
  const std::vector<std::string> policies = {"quest:budget=0.2,min=0", "", "gbsa:keep=0.2,n_min=2"};
  for (const std::string& p : policies) {
    GenerationRequest r;
    r.prompt_ids = std::vector<int>(300, 7);
    r.max_tokens = 24;
    r.ignore_eos = true;
    RequestCallbacks cb;
    cb.on_done = [&](const GenerationResult& res) {
      done += 1;
      EXPECT_EQ(res.tokens.size(), 24u);
    };
    cb.on_error = [&](const std::string& m) {
      failed += 1;
      ADD_FAILURE() << m;
    };
    scheduler.submit(r, p, cb);
  }
  while (scheduler.step()) most_running = std::max(most_running, scheduler.metrics().running);
  EXPECT_EQ(done, 3);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(scheduler.metrics().policy_switches, 0u);
  EXPECT_EQ(most_running, 3);
}

// dense+art on the GPU (the kernel's rule over every page in the group's bound order): with a
// patience beyond the list it is dense (within the two kernels' rounding); with every round
// stable it stops after round 1 plus the lag, reads fewer bytes than dense (counted on the
// device) and moves the logits.
TEST(GpuEngine, ArtOverDenseReadsWhatItsRuleSays) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-long/golden.json");
  const std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  const std::vector<int> forced = meta["greedy_ids"].get<std::vector<int>>();
  // One CTA per list: a lag of 4 rounds of 16 pages, so a stop after round 1 reads 96 of the 256.
  const std::string rule = "art:order=group,stop=group,test=probe,round=4,warps=8,";
  auto run = [&](const std::string& policy, double& bytes) {
    EngineOptions o = gpu_options(int(prompt.size()) + 32);
    o.policy = policy;
    Engine e(o);
    const int s = e.open_sequence();
    e.append(s, std::vector<int>(prompt.begin(), prompt.end() - 1), {});
    const double before = e.decode_kv_bytes_read();
    std::vector<float> all;
    for (int i = 0; i < 8; ++i) {
      const int t = i == 0 ? prompt.back() : forced[size_t(i - 1)];
      const std::vector<float> l = e.decode(std::span<const int>(&s, 1), std::span<const int>(&t, 1));
      all.insert(all.end(), l.begin(), l.end());
    }
    bytes = e.decode_kv_bytes_read() - before;
    return all;
  };
  double dense_bytes = 0, never_bytes = 0, stop_bytes = 0;
  const std::vector<float> dense = run("dense", dense_bytes);
  const std::vector<float> never = run(rule + "patience=100000", never_bytes);
  const std::vector<float> stop = run(rule + "patience=1,eps_scale=1000,eps_dir=2", stop_bytes);
  float never_diff = 0, stop_diff = 0;
  for (size_t i = 0; i < dense.size(); ++i) {
    never_diff = std::max(never_diff, std::fabs(never[i] - dense[i]));
    stop_diff = std::max(stop_diff, std::fabs(stop[i] - dense[i]));
  }
  std::printf("[ art      ] dense+art on the GPU, demo-long, 8 steps: never stopping max |diff| = %.4f (bytes %.2f of "
              "dense's), stopping after round 1: %.3f (bytes %.2f)\n",
              never_diff, never_bytes / dense_bytes, stop_diff, stop_bytes / dense_bytes);
  EXPECT_LT(never_diff, 0.05f);
  EXPECT_GE(never_bytes, dense_bytes);  // every page, and the digests
  EXPECT_LT(stop_bytes, dense_bytes);
  EXPECT_GT(stop_diff, 0.01f);
}

// MAC on the GPU against the CPU policy (demo-long, teacher-forced from a prompt whose code
// repeats itself, so heads hit): the rings fill from the prompt, each step matches, cuts its
// base's pages at the prefix end and merges with the reused prefixes. The GPU matches bf16
// pre-RoPE queries where the CPU matches fp32 ones: a decision near the threshold may flip,
// which the logit tolerance covers (printed). A fork decodes as its source.
TEST(GpuEngine, MacFollowsTheCpuPolicy) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-long/golden.json");
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<int> forced = meta["greedy_ids"].get<std::vector<int>>();
  const std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
  auto token = [&](int i) { return i == 0 ? prompt.back() : forced[size_t(i - 1)]; };
  const int steps = 16;
  // mac+art on the group rule (written 2026-11-27 without a device): with patience beyond its
  // blocks it reads what MAC reads, in ART's order (`below`) and by ART's kernel.
  for (const std::string policy :
       {"mac:tau=0.6,window=64,band=64,min_context=0", "quest:budget=0.25,min=0+mac:tau=0.6,window=64,band=64,min_context=0",
        "gbsa:keep=0.3,n_min=16+mac:tau=0.6,window=128,band=32,min_context=0",
        "quest:budget=0.25,min=0+mac:tau=0.6,window=64,band=64,min_context=0+art:stop=group,test=probe,round=16,"
        "patience=100000"}) {
    EngineOptions co = gpu_options(int(prompt.size()) + 64), go = co;
    co.device = "cpu";
    co.policy = go.policy = policy;
    go.max_sequences = 2;  // the fork's pages
    Engine cpu(co), gpu(go), dense(gpu_options(int(prompt.size()) + 64));
    const int sc = cpu.open_sequence(), sg = gpu.open_sequence(), sd = dense.open_sequence();
    cpu.append(sc, prefix, {});
    gpu.append(sg, prefix, {});
    dense.append(sd, prefix, {});
    const int fork = gpu.fork_sequence(sg);
    float worst = 0, from_dense = 0, from_fork = 0;
    for (int i = 0; i < steps; ++i) {
      const int t = token(i);
      const std::vector<float> c = cpu.decode(std::span<const int>(&sc, 1), std::span<const int>(&t, 1));
      const std::vector<float> g = gpu.decode(std::span<const int>(&sg, 1), std::span<const int>(&t, 1));
      const std::vector<float> f = gpu.decode(std::span<const int>(&fork, 1), std::span<const int>(&t, 1));
      const std::vector<float> d = dense.decode(std::span<const int>(&sd, 1), std::span<const int>(&t, 1));
      for (size_t v = 0; v < c.size(); ++v) {
        worst = std::max(worst, std::fabs(c[v] - g[v]));
        from_dense = std::max(from_dense, std::fabs(g[v] - d[v]));
        from_fork = std::max(from_fork, std::fabs(g[v] - f[v]));
      }
    }
    const double hit_rate = cpu.policy_stats().counters.at("mac_hit_rate");
    std::printf("[ mac      ] %s, demo-long, %d steps: CPU hit rate %.2f, max |GPU - CPU| = %.3f, |GPU - dense| = %.3f, "
                "GPU bytes %.3g vs dense %.3g\n",
                policy.c_str(), steps, hit_rate, worst, from_dense, gpu.decode_kv_bytes_read() / 2,
                dense.decode_kv_bytes_read());
    EXPECT_GT(hit_rate, 0.05) << policy << ": the test needs hits";
    EXPECT_LT(worst, kLogitTol) << policy;
    EXPECT_EQ(from_fork, 0.0f) << policy << ": a fork's rings are its source's";
    EXPECT_GT(from_dense, 0.01f) << policy << " ran as dense?";
  }
}

// RetroAttention on the GPU against the CPU policy (demo-long, teacher-forced): each step runs
// the sequence's last w-1 tokens again, past rows read the pages selected now they have not seen
// and merge into their cached outputs. Apart from quest alone (the corrections act), a fork
// decodes as its source.
TEST(GpuEngine, RetroFollowsTheCpuPolicy) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-long/golden.json");
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<int> forced = meta["greedy_ids"].get<std::vector<int>>();
  const std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
  auto token = [&](int i) { return i == 0 ? prompt.back() : forced[size_t(i - 1)]; };
  const int steps = 16;
  for (const std::string base : {"quest:budget=0.1,min=0", "gbsa:keep=0.1,n_min=16"})
    for (int w : {2, 4}) {
      const std::string policy = base + "+retro:w=" + std::to_string(w);
      EngineOptions co = gpu_options(int(prompt.size()) + 64), go = co, bo = co;
      co.device = "cpu";
      co.policy = go.policy = policy;
      bo.policy = base;
      go.max_sequences = 2;  // the fork's pages
      Engine cpu(co), gpu(go), alone(bo);
      const int sc = cpu.open_sequence(), sg = gpu.open_sequence(), sb = alone.open_sequence();
      cpu.append(sc, prefix, {});
      gpu.append(sg, prefix, {});
      alone.append(sb, prefix, {});
      const int fork = gpu.fork_sequence(sg);
      float worst = 0, from_base = 0, from_fork = 0;
      for (int i = 0; i < steps; ++i) {
        const int t = token(i);
        const std::vector<float> c = cpu.decode(std::span<const int>(&sc, 1), std::span<const int>(&t, 1));
        const std::vector<float> g = gpu.decode(std::span<const int>(&sg, 1), std::span<const int>(&t, 1));
        const std::vector<float> f = gpu.decode(std::span<const int>(&fork, 1), std::span<const int>(&t, 1));
        const std::vector<float> b = alone.decode(std::span<const int>(&sb, 1), std::span<const int>(&t, 1));
        for (size_t v = 0; v < c.size(); ++v) {
          worst = std::max(worst, std::fabs(c[v] - g[v]));
          from_base = std::max(from_base, std::fabs(g[v] - b[v]));
          from_fork = std::max(from_fork, std::fabs(g[v] - f[v]));
        }
      }
      std::printf("[ retro    ] %s, demo-long, %d steps: max |GPU - CPU| = %.3f, |retro - base| = %.3f\n", policy.c_str(),
                  steps, worst, from_base);
      EXPECT_LT(worst, kLogitTol) << policy;
      EXPECT_GT(from_base, 0.01f) << policy << ": the corrections changed nothing";
      EXPECT_EQ(from_fork, 0.0f) << policy << ": a fork's state is its source's";
    }
}

// ART's GPU rule with stops against the CPU policy running the same rule at the kernel's lag
// (art_decode_lag for the step's shape: one CTA per list, art:warps=8): every round stable, so
// each list stops after its first round on both devices and reads the lag's rounds past it, over
// each base's plan in its visiting order. Logits within bf16 tolerance, apart from dense.
TEST(GpuEngine, ArtStopsAsTheCpuPolicyDoes) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  nlohmann::json meta = read_json(kRoot / "tests/fixtures/golden/demo-long/golden.json");
  const std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  const std::vector<int> forced = meta["greedy_ids"].get<std::vector<int>>();
  const std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
  const int steps = 8;
  EngineOptions base_opt = gpu_options(int(prompt.size()) + 32);
  Engine probe(base_opt);
  const ModelConfig& c = probe.config();
  ArtDecodeArgs shape;
  shape.attn = PagedDecodeArgs{.batch = 1, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads,
                               .head_dim = c.head_dim, .max_pages_per_seq = (int(prompt.size()) + 32 + 15) / 16,
                               .max_seq_len = int(prompt.size()) + steps, .tables_per_kv_head = true};
  shape.art.round_pages = 16;
  shape.art.max_warps = 8;
  const int lag = cuda::art_decode_lag(shape);
  ASSERT_GE(lag, 0);
  const std::string rule = "stop=group,test=probe,round=4,patience=1,eps_scale=1000,eps_dir=2";
  for (const std::string& spec : {"art:order=group," + rule, "gbsa:keep=0.5,n_min=16+art:" + rule,
                                 "quest:budget=0.5,min=0,dense_layers=0+art:" + rule,
                                 "streaming:sink=4,window=2048+art:" + rule}) {
    EngineOptions go = base_opt, co = base_opt, dopt = base_opt;
    go.policy = spec + ",warps=8";
    co.policy = spec + ",lag=" + std::to_string(lag);
    co.device = "cpu";
    Engine gpu(go), cpu(co), dense(dopt);
    const int sg = gpu.open_sequence(), sc = cpu.open_sequence(), sd = dense.open_sequence();
    gpu.append(sg, prefix, {});
    cpu.append(sc, prefix, {});
    dense.append(sd, prefix, {});
    float worst = 0, from_dense = 0;
    for (int i = 0; i < steps; ++i) {
      const int t = i == 0 ? prompt.back() : forced[size_t(i - 1)];
      const std::vector<float> g = gpu.decode(std::span<const int>(&sg, 1), std::span<const int>(&t, 1));
      const std::vector<float> x = cpu.decode(std::span<const int>(&sc, 1), std::span<const int>(&t, 1));
      const std::vector<float> d = dense.decode(std::span<const int>(&sd, 1), std::span<const int>(&t, 1));
      for (size_t v = 0; v < g.size(); ++v) {
        worst = std::max(worst, std::fabs(g[v] - x[v]));
        from_dense = std::max(from_dense, std::fabs(g[v] - d[v]));
      }
    }
    std::printf("[ art      ] %s, lag %d, demo-long, %d steps: max |GPU - CPU| = %.3f, |GPU - dense| = %.3f, bytes "
                "GPU %.3g CPU %.3g\n",
                spec.c_str(), lag, steps, worst, from_dense, gpu.decode_kv_bytes_read(), cpu.decode_kv_bytes_read());
    EXPECT_LT(worst, kLogitTol) << spec;
    EXPECT_GT(from_dense, 0.01f) << spec << ": the stops changed nothing";
  }
}

// ART's defaults are the GPU kernel's rule: `art`, `gbsa+art`, `quest+art` run as written; the
// CPU-only variants are refused.
TEST(GpuEngine, RefusesArtOutsideItsGpuRule) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const char* policy : {"art", "gbsa+art", "quest:budget=0.5+art", "streaming+art",
                             "gbsa+mac+art:stop=group,test=probe"}) {
    EngineOptions o = gpu_options(256);
    o.policy = policy;
    EXPECT_NO_THROW(Engine e(o)) << policy;
  }
  // mac+art stops each head alone by default (the CPU's rule): the GPU asks for stop=group.
  for (const char* policy : {"art:stop=head", "gbsa+art:test=full", "art:order=bound",
                             "art:order=bound,stop=group,test=probe", "art:order=group,round=64", "gbsa+mac+art"}) {
    EngineOptions o = gpu_options(256);
    o.policy = policy;
    EXPECT_THROW(Engine e(o), Error) << policy;
  }
}

// Every policy runs on the GPU; cs composed with mac or art does not yet.
TEST(GpuEngine, RefusesCompositionsThatRunOnTheCpuOnly) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const char* policy : {"cs+art", "cs+mac"}) {
    EngineOptions o = gpu_options(256);
    o.policy = policy;
    try {
      Engine e(o);
      ADD_FAILURE() << policy << ": expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace skim
