#include "model/weights.h"

#include <gtest/gtest.h>

#include <chrono>

#include "model/config.h"
#include "model/safetensors.h"
#include "model_files.h"

namespace skim {
namespace {

using test::expect_error;
using test::FakeTensor;
using test::TempDir;

const std::filesystem::path kDemo = std::filesystem::path(SKIM_SOURCE_DIR) / "models/demo-code-28m";

// Element i of a tensor as stored, converted on its own: the reference for spot checks.
float stored_value(const TensorView& v, size_t i) {
  float out;
  to_f32(v.dtype, static_cast<const uint8_t*>(v.data) + i * dtype_size(v.dtype), &out, 1);
  return out;
}

TEST(DemoModel, LoadsQuicklyWithValuesOfTheCheckpoint) {
  ModelConfig c = load_model_config(kDemo);
  auto start = std::chrono::steady_clock::now();
  ModelWeights w = load_weights(kDemo, c);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("load_seconds", std::to_string(seconds));  // speed belongs in bench/, not in a test

  ASSERT_EQ(w.layers.size(), 8u);
  EXPECT_EQ(w.embed.rows, 8192);
  EXPECT_EQ(w.embed.cols, 512);
  EXPECT_TRUE(w.lm_head.empty());  // tied
  EXPECT_EQ(&w.output(), &w.embed);
  EXPECT_EQ(w.final_norm.size(), 512u);
  EXPECT_EQ(w.layers[3].wk.rows, 128);
  EXPECT_EQ(w.layers[3].wo.cols, 512);
  EXPECT_EQ(w.layers[7].w_down.rows, 512);
  EXPECT_EQ(w.layers[7].w_down.cols, 1536);
  EXPECT_TRUE(w.layers[0].bq.empty());
  EXPECT_TRUE(w.layers[0].q_norm.empty());

  TensorStore store(kDemo);
  const TensorView& embed = store.get("model.embed_tokens.weight");
  EXPECT_EQ(embed.dtype, DType::BF16);
  for (size_t i : {size_t(0), size_t(12345), size_t(8192 * 512 - 1)})
    EXPECT_EQ(w.embed.at(i), stored_value(embed, i)) << i;
  // A tensor from a later shard, away from its start.
  const TensorView& up = store.get("model.layers.5.mlp.up_proj.weight");
  EXPECT_NE(up.file.find("model-00003-of-00004"), std::string::npos) << up.file;
  for (size_t i : {size_t(1), size_t(700 * 512 + 3), size_t(1536 * 512 - 1)})
    EXPECT_EQ(w.layers[5].w_up.at(i), stored_value(up, i)) << i;
  const TensorView& norm = store.get("model.layers.2.input_layernorm.weight");
  for (size_t i : {size_t(0), size_t(511)})
    EXPECT_EQ(w.layers[2].attn_norm[i], stored_value(norm, i));
}

// Checkpoints saved by transformers itself, one per family.
TEST(FixtureModels, LoadWithTheirFamilyTensors) {
  for (const char* name : {"tiny-llama3", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"}) {
    auto dir = std::filesystem::path(SKIM_SOURCE_DIR) / "tests/fixtures/models" / name;
    ModelConfig c = load_model_config(dir);
    ModelWeights w = load_weights(dir, c);
    EXPECT_EQ(int(w.layers.size()), c.num_layers) << name;
    EXPECT_EQ(w.lm_head.empty(), c.tie_word_embeddings) << name;
    EXPECT_EQ(!w.layers[0].bq.empty(), c.attention_bias) << name;
    EXPECT_EQ(!w.layers[0].q_norm.empty(), c.qk_norm) << name;
  }
}

TEST(TinyModel, LoadsEveryFamilyLayout) {
  for (const char* type : {"llama", "mistral", "qwen2", "qwen3"}) {
    TempDir dir;
    nlohmann::json config = test::tiny_config_json();
    config["model_type"] = type;
    config["tie_word_embeddings"] = false;
    ModelConfig c = test::write_model(dir.path(), config);
    ModelWeights w = load_weights(dir.path(), c);
    EXPECT_EQ(w.lm_head.rows, 16) << type;
    EXPECT_EQ(&w.output(), &w.lm_head) << type;
    EXPECT_EQ(w.layers[1].bq.size(), std::string(type) == "qwen2" ? 8u : 0u) << type;
    EXPECT_EQ(w.layers[1].bv.size(), std::string(type) == "qwen2" ? 4u : 0u) << type;
    EXPECT_EQ(w.layers[1].k_norm.size(), std::string(type) == "qwen3" ? 4u : 0u) << type;
  }
}

TEST(TinyModel, ConvertsF32F16AndBf16) {
  TempDir dir;
  nlohmann::json config = test::tiny_config_json();
  ModelConfig c = test::write_model(dir.path(), config, [](std::vector<FakeTensor>& t) {
    for (FakeTensor& x : t) {
      if (x.name == "model.norm.weight") {
        x.dtype = DType::F16;
        x.values = {0.5f, -1.5f, 2.0f, 0.25f, 3.0f, -0.125f, 1.0f, 65504.0f};
      } else if (x.name == "model.layers.0.input_layernorm.weight") {
        x.dtype = DType::F32;
        x.values = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 1e-30f};
      }
    }
  });
  ModelWeights w = load_weights(dir.path(), c);
  EXPECT_EQ(w.final_norm, (std::vector<float>{0.5f, -1.5f, 2.0f, 0.25f, 3.0f, -0.125f, 1.0f, 65504.0f}));
  EXPECT_EQ(w.layers[0].attn_norm,
            (std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 1e-30f}));
  EXPECT_EQ(w.embed.at(5), 5.0f / 64.0f);  // bf16, exact
}

// HF ties after loading, so a stored lm_head of a tied model is ignored; it must still have
// the right shape.
TEST(TinyModel, TiedModelIgnoresAStoredLmHead) {
  TempDir dir;
  ModelConfig c = test::write_model(dir.path(), test::tiny_config_json(),
                                    [](std::vector<FakeTensor>& t) {
                                      t.push_back({"lm_head.weight", {16, 8}, DType::BF16,
                                                   std::vector<float>(128, 7.0f)});
                                    });
  ModelWeights w = load_weights(dir.path(), c);
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(&w.output(), &w.embed);
  EXPECT_NE(w.output().at(3), 7.0f);
}

TEST(TinyModel, TiedModelRejectsAStoredLmHeadOfTheWrongShape) {
  TempDir dir;
  ModelConfig c = test::write_model(dir.path(), test::tiny_config_json(),
                                    [](std::vector<FakeTensor>& t) {
                                      t.push_back({"lm_head.weight", {15, 8}, DType::BF16, {}});
                                    });
  expect_error([&] { load_weights(dir.path(), c); },
               {"lm_head.weight in model.safetensors", "[15, 8]", "[16, 8]"});
}

TEST(TinyModel, AcceptsRotaryInvFreqBuffers) {
  TempDir dir;
  ModelConfig c = test::write_model(dir.path(), test::tiny_config_json(),
                                    [](std::vector<FakeTensor>& t) {
                                      t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq",
                                                   {2}, DType::F32, {}});
                                    });
  EXPECT_NO_THROW(load_weights(dir.path(), c));
}

TEST(BadWeights, MissingTensor) {
  TempDir dir;
  ModelConfig c = test::write_model(dir.path(), test::tiny_config_json(),
                                    [](std::vector<FakeTensor>& t) {
                                      std::erase_if(t, [](const FakeTensor& x) {
                                        return x.name == "model.layers.1.mlp.gate_proj.weight";
                                      });
                                    });
  expect_error([&] { load_weights(dir.path(), c); },
               {"model.layers.1.mlp.gate_proj.weight", "missing", dir.path().string()});
}

TEST(BadWeights, MissingLmHeadWhenUntied) {
  TempDir dir;
  nlohmann::json config = test::tiny_config_json();
  ModelConfig c = test::write_model(dir.path(), config);  // tied: no lm_head written
  c.tie_word_embeddings = false;
  expect_error([&] { load_weights(dir.path(), c); }, {"lm_head.weight", "missing"});
}

TEST(BadWeights, ExtraTensor) {
  TempDir dir;
  ModelConfig c = test::write_model(dir.path(), test::tiny_config_json(),
                                    [](std::vector<FakeTensor>& t) {
                                      t.push_back({"model.layers.0.mlp.up_proj.bias", {12},
                                                   DType::F32, {}});
                                    });
  expect_error([&] { load_weights(dir.path(), c); },
               {"unexpected", "model.layers.0.mlp.up_proj.bias", "model.safetensors"});
}

TEST(BadWeights, ExtraLayer) {
  TempDir dir;
  nlohmann::json config = test::tiny_config_json();
  test::write_model(dir.path(), config);
  config["num_hidden_layers"] = 1;
  ModelConfig fewer = parse_model_config(config.dump(), "config.json");
  expect_error([&] { load_weights(dir.path(), fewer); },
               {"unexpected tensors", "model.layers.1."});
}

TEST(BadWeights, WrongShape) {
  TempDir dir;
  ModelConfig c = test::write_model(dir.path(), test::tiny_config_json(),
                                    [](std::vector<FakeTensor>& t) {
                                      for (FakeTensor& x : t)
                                        if (x.name == "model.layers.1.mlp.up_proj.weight")
                                          x.shape = {12, 7};
                                    });
  expect_error([&] { load_weights(dir.path(), c); },
               {"model.layers.1.mlp.up_proj.weight in model.safetensors: shape [12, 7], config "
                "expects [12, 8]"});
}

TEST(BadWeights, MissingBiasOfQwen2) {
  TempDir dir;
  nlohmann::json config = test::tiny_config_json();
  config["model_type"] = "qwen2";
  ModelConfig c = test::write_model(dir.path(), config, [](std::vector<FakeTensor>& t) {
    std::erase_if(t, [](const FakeTensor& x) { return x.name.ends_with("k_proj.bias"); });
  });
  expect_error([&] { load_weights(dir.path(), c); },
               {"model.layers.0.self_attn.k_proj.bias", "missing"});
}

}  // namespace
}  // namespace skim
