// Tensor parallelism on GPUs (issue 19): a random model split over 2 GPUs (NCCL) against the
// same model on one GPU: logits within bf16 rounding of the changed summation order, greedy
// tokens identical, for dense and the GPU's page selectors. Skips without 2 GPUs and NCCL.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <cmath>

#include "../test_random.h"
#include "backend/cpu/ops.h"
#include "core/error.h"
#include "backend/cuda/gpu_tensor_parallel.h"
#include "backend/cuda/nccl_communicator.h"
#include "model/model.h"
#include "skim/engine.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace skim {
namespace {

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = a.size() == b.size() ? 0.0f : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

int cuda_devices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Matrix random_matrix(int rows, int cols) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.f32 = test::random_vector(size_t(rows) * cols, 1.0f / std::sqrt(float(cols)));
  return m;
}

// 2 layers, 4 query / 2 KV heads of 128 (the GPU kernels' head size), an odd vocabulary (the
// last rank's slice is padded), q/k/v biases.
std::unique_ptr<Model> random_model() {
  auto m = std::make_unique<Model>();
  ModelConfig& c = m->config;
  c.model_type = "qwen2";
  c.vocab_size = 1001;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6f;
  c.attention_bias = true;
  m->rope_inv_freq.resize(size_t(c.head_dim / 2));
  rope_inv_freq(c.rope, c.head_dim, m->rope_inv_freq.data());
  ModelWeights& w = m->weights;
  w.embed = random_matrix(c.vocab_size, c.hidden_size);
  w.lm_head = random_matrix(c.vocab_size, c.hidden_size);
  w.final_norm.assign(size_t(c.hidden_size), 1.0f);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights x;
    x.attn_norm.assign(size_t(c.hidden_size), 1.0f);
    x.mlp_norm.assign(size_t(c.hidden_size), 1.0f);
    x.wq = random_matrix(c.q_dim(), c.hidden_size);
    x.wk = random_matrix(c.kv_dim(), c.hidden_size);
    x.wv = random_matrix(c.kv_dim(), c.hidden_size);
    x.wo = random_matrix(c.hidden_size, c.q_dim());
    x.bq = test::random_vector(size_t(c.q_dim()), 0.1f);
    x.bk = test::random_vector(size_t(c.kv_dim()), 0.1f);
    x.bv = test::random_vector(size_t(c.kv_dim()), 0.1f);
    x.w_gate = random_matrix(c.intermediate_size, c.hidden_size);
    x.w_up = random_matrix(c.intermediate_size, c.hidden_size);
    x.w_down = random_matrix(c.hidden_size, c.intermediate_size);
    w.layers.push_back(std::move(x));
  }
  return m;
}

struct Steps {
  std::vector<std::vector<float>> logits;  // the prompt's last row, then each decode step's
  std::vector<int32_t> tokens;             // greedy
};

// Prefill `prompt`, then `steps` greedy decode steps through `f`.
Steps run_steps(Forward& f, int policy_index, const std::vector<int>& prompt, int steps) {
  auto policy = make_policy("dense");  // the GPU plans by the policy index, not this object
  PageTable table;
  f.reserve(table, int(prompt.size()) + steps);
  Steps out;
  ForwardBatch fb;
  for (size_t i = 0; i < prompt.size(); ++i) {
    fb.tokens.push_back(prompt[i]);
    fb.positions.push_back(int(i));
    fb.tables.push_back(&table);
  }
  fb.logits_rows = {int(prompt.size()) - 1};
  std::vector<float> logits;
  f.run(fb, *policy, logits);
  table.length = int(prompt.size());
  for (int s = 0; s <= steps; ++s) {
    out.logits.push_back(logits);
    const int next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.tokens.push_back(next);
    if (s == steps) break;
    ForwardBatch d;
    d.tokens = {next};
    d.positions = {table.length};
    d.tables = {&table};
    d.logits_rows = {0};
    d.decode = true;
    d.policy = {policy_index};
    f.run(d, *policy, logits);
    table.length += 1;
  }
  f.release(table);
  return out;
}

TEST(GpuTensorParallel, TwoGpusEqualOne) {
  if (cuda_devices() < 2 || !cuda::have_nccl()) GTEST_SKIP() << "needs 2 GPUs and NCCL";
  auto model = random_model();
  const ModelConfig& c = model->config;
  const std::vector<int> prompt = [] {
    std::vector<int> p(300);
    for (int& t : p) t = test::random_int(0, 1000);
    return p;
  }();
  const int steps = 12;
  KVCacheShape shape{.num_layers = c.num_layers, .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                     .page_size = 16, .num_pages = 64};
  cuda::GpuForwardOptions o;
  o.max_rows = 512;
  o.max_pages_per_seq = 64;
  cuda::check(cudaSetDevice(0), "cudaSetDevice");
  cuda::GpuForward one(std::make_shared<const cuda::GpuWeights>(cuda::upload_weights(*model)), shape, o);
  auto two = cuda::make_gpu_tensor_parallel(*model, 2, shape, o);
  // Selections on bf16 bounds: budgets that keep most pages, so that a near-tie the other
  // summation order flips swaps pages of little weight (at quest:budget=48 tokens one run in
  // two or three swapped a heavy page: logits off by 4).
  for (const char* policy : {"dense", "gbsa:keep=0.6,n_min=2", "quest:budget=0.75,min=0,dense_layers=0"}) {
    const int i1 = one.acquire_policy(policy), i2 = two->acquire_policy(policy);
    const Steps a = run_steps(one, i1, prompt, steps), b = run_steps(*two, i2, prompt, steps);
    // Each run feeds back its own greedy token: up to the first step where they differ (a
    // near-tie of one GPU's top two logits, which the other rounding order may flip; then the
    // inputs differ and the comparison ends) the logits agree within bf16 rounding.
    size_t same = 0;
    while (same < a.tokens.size() && a.tokens[same] == b.tokens[same]) ++same;
    float worst = 0;
    for (size_t s = 0; s < std::min(a.logits.size(), same + 1); ++s)
      for (size_t v = 0; v < a.logits[s].size(); ++v) worst = std::max(worst, std::fabs(a.logits[s][v] - b.logits[s][v]));
    // Logits of std ~1: the bf16 activations before each projection round differently when
    // the row-parallel sums are split. A selection may also swap a near-tied page of little
    // weight: gbsa at keep 0.6 moved the logits by 0.161 in one run (H100, 2026-11-27,
    // SKIM_TEST_SEED=3479887258), dense stays within 0.011.
    const bool dense = std::string(policy) == "dense";
    EXPECT_LT(worst, dense ? 0.1f : 0.25f) << policy;
    if (same < a.tokens.size()) {
      std::vector<float> top = a.logits[same];
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      std::printf("%s: tokens differ at step %zu (%d vs %d), one GPU's top-2 margin %.4f\n", policy, same,
                  a.tokens[same], b.tokens[same], top[0] - top[1]);
      EXPECT_LT(top[0] - top[1], 2 * worst + 1e-3f) << policy << ": a flip where the top two were not tied";
    }
    std::printf("%s: worst logit difference %.4f\n", policy, worst);
    one.release_policy(i1);
    two->release_policy(i2);
  }
}

// A Hugging Face directory of `m` (config.json, F32 safetensors), for the engine.
void write_model_dir(const Model& m, const std::filesystem::path& dir) {
  const ModelConfig& c = m.config;
  std::filesystem::create_directories(dir);
  nlohmann::json cfg = {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"},
                        {"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_layers},
                        {"num_attention_heads", c.num_heads}, {"num_key_value_heads", c.num_kv_heads},
                        {"head_dim", c.head_dim}, {"max_position_embeddings", c.max_position_embeddings},
                        {"rms_norm_eps", c.rms_norm_eps}, {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
                        {"hidden_act", "silu"}, {"torch_dtype", "float32"}};
  std::ofstream(dir / "config.json") << cfg.dump();
  std::vector<std::pair<std::string, const std::vector<float>*>> tensors;
  std::vector<std::vector<int64_t>> shapes;
  auto add = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
    tensors.push_back({name, &v});
    shapes.push_back(std::move(shape));
  };
  auto mat = [&](const std::string& name, const Matrix& x) { add(name, x.f32, {x.rows, x.cols}); };
  const ModelWeights& w = m.weights;
  mat("model.embed_tokens.weight", w.embed);
  mat("lm_head.weight", w.lm_head);
  add("model.norm.weight", w.final_norm, {c.hidden_size});
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& x = w.layers[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", x.attn_norm, {c.hidden_size});
    add(p + "post_attention_layernorm.weight", x.mlp_norm, {c.hidden_size});
    mat(p + "self_attn.q_proj.weight", x.wq);
    mat(p + "self_attn.k_proj.weight", x.wk);
    mat(p + "self_attn.v_proj.weight", x.wv);
    mat(p + "self_attn.o_proj.weight", x.wo);
    add(p + "self_attn.q_proj.bias", x.bq, {int64_t(x.bq.size())});
    add(p + "self_attn.k_proj.bias", x.bk, {int64_t(x.bk.size())});
    add(p + "self_attn.v_proj.bias", x.bv, {int64_t(x.bv.size())});
    mat(p + "mlp.gate_proj.weight", x.w_gate);
    mat(p + "mlp.up_proj.weight", x.w_up);
    mat(p + "mlp.down_proj.weight", x.w_down);
  }
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t bytes = tensors[i].second->size() * sizeof(float);
    header[tensors[i].first] = {{"dtype", "F32"}, {"shape", shapes[i]}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream f(dir / "model.safetensors", std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), sizeof n);
  f.write(h.data(), std::streamsize(n));
  for (auto& [name, v] : tensors) f.write(reinterpret_cast<const char*>(v->data()), std::streamsize(v->size() * sizeof(float)));
}

// The engine with --tp 2 on the GPU (ranks sampling on their devices) generates what one GPU
// does, and refuses what it cannot run with a clear message.
TEST(GpuTensorParallel, EngineGeneratesAsOneGpu) {
  if (cuda_devices() < 2 || !cuda::have_nccl()) GTEST_SKIP() << "needs 2 GPUs and NCCL";
  const auto dir = std::filesystem::temp_directory_path() / "skim-tp-random-model";
  write_model_dir(*random_model(), dir);
  GenerationRequest req;
  for (int i = 0; i < 200; ++i) req.prompt_ids.push_back(test::random_int(0, 1000));
  req.max_tokens = 24;
  req.ignore_eos = true;
  // Every GPU policy family, its per-head state (MAC's rings, Retro's caches, ART's counters)
  // kept by each rank for its heads; budgets that keep most pages (see TwoGpusEqualOne).
  for (const char* policy : {"dense", "quest:budget=0.75,min=0,dense_layers=0+retro:w=2",
                             "mac:min_context=0,band=64", "art:order=group,stop=group,test=probe",
                             "gbsa:keep=0.6,n_min=2+art:stop=group,test=probe"}) {
    std::vector<std::vector<int>> tokens;
    for (int tp : {1, 2}) {
      EngineOptions o;
      o.model_dir = dir;
      o.device = "cuda";
      o.max_context = 512;
      o.policy = policy;
      o.dense_fallback = false;  // short prompts: the policies still select
      o.tensor_parallel = tp;
      Engine e(o);
      tokens.push_back(e.generate({req})[0].tokens);
    }
    EXPECT_EQ(tokens[0], tokens[1]) << policy;
  }
  EngineOptions bad;
  bad.model_dir = dir;
  bad.device = "cuda";
  bad.max_context = 512;
  bad.tensor_parallel = 3;  // 4 heads do not split over 3 GPUs
  EXPECT_THROW(Engine{bad}, Error);
  std::filesystem::remove_all(dir);
}

// The demo model (1 KV head, 4 query heads) on 2 GPUs: its KV head replicated, each GPU
// attending the whole group from the gathered queries and keeping its own 2 heads. One GPU
// decodes greedily; two GPUs are fed the same tokens (teacher forcing, so a near-tie cannot
// send them down another text): logits within bf16 tolerance (as the GPU's golden test
// allows against transformers), the same greedy token wherever one GPU's top-2 margin is
// clear. (Free-running, the demo model's texts part at a near-tie: at token 23 of
// "def fibonacci(n):" for every policy.) The policies' own decisions (gbsa's blocks, MAC's hits,
// ART's stops) compare bf16 values too: where one sits at its threshold, one and two GPUs (whose
// sums differ by rounding) decide apart for that step alone (teacher forced, a step's decision
// changes no later step). So a policy other than dense may exceed the tolerance on 2 of the 48
// steps: gbsa at keep 0.6 did on one random prompt in about ten runs (0.86, 4 x H200,
// 2026-11-27).

TEST(GpuTensorParallel, TheDemoModelsReplicatedKvHeadDecodesAsOneGpu) {
  if (cuda_devices() < 2 || !cuda::have_nccl()) GTEST_SKIP() << "needs 2 GPUs and NCCL";
  constexpr float kLogitTol = 0.5f;
  const std::vector<int> prompt = [] {
    std::vector<int> p(200);
    for (int& t : p) t = test::random_int(100, 8000);
    return p;
  }();
  auto engine = [](const char* policy, int tp) {
    EngineOptions o;
    o.model_dir = std::filesystem::path(SKIM_SOURCE_DIR) / "models/demo-code-28m";
    o.device = "cuda";
    o.max_context = 1024;
    o.policy = policy;
    o.dense_fallback = false;  // short prompts: the policies still select
    o.tensor_parallel = tp;
    return std::make_unique<Engine>(o);
  };
  auto argmax = [](const std::vector<float>& l) { return int(std::max_element(l.begin(), l.end()) - l.begin()); };
  for (const char* policy : {"dense", "gbsa:keep=0.6,n_min=2", "mac:min_context=0,band=64",
                             "art:order=group,stop=group,test=probe"}) {
    auto one = engine(policy, 1), two = engine(policy, 2);
    const int s1 = one->open_sequence(), s2 = two->open_sequence();
    std::vector<float> a = one->append(s1, prompt, std::vector<int>{int(prompt.size()) - 1});
    std::vector<float> b = two->append(s2, prompt, std::vector<int>{int(prompt.size()) - 1});
    const int allowed = std::string(policy) == "dense" ? 0 : 2;
    float worst = 0;
    std::vector<float> diffs;
    for (int step = 0; step < 48; ++step) {
      diffs.push_back(max_abs_diff(a, b));
      worst = std::max(worst, diffs.back());
      std::vector<float> sorted = a;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] > kLogitTol && diffs.back() < kLogitTol) {
        EXPECT_EQ(argmax(a), argmax(b)) << policy << " step " << step;
      }
      const int next = argmax(a);
      a = one->decode(std::span<const int>(&s1, 1), std::span<const int>(&next, 1));
      b = two->decode(std::span<const int>(&s2, 1), std::span<const int>(&next, 1));
    }
    const long over = std::count_if(diffs.begin(), diffs.end(), [](float d) { return d >= kLogitTol; });
    EXPECT_LE(over, allowed) << policy << ": steps past the tolerance (worst " << worst << ")";
    std::printf("%s: worst logit difference, 1 GPU vs 2 (replicated KV head): %.4f (%ld of 48 steps past %.1f)\n",
                policy, worst, over, kLogitTol);
  }
}

}  // namespace
}  // namespace skim
