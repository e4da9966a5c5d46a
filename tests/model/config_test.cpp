#include "model/config.h"

#include <gtest/gtest.h>

#include "model_files.h"

namespace skim {
namespace {

using nlohmann::json;
using test::expect_error;
using test::TempDir;

const std::filesystem::path kRoot(SKIM_SOURCE_DIR);

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "config.json"); }

void expect_config_error(const json& j, std::initializer_list<std::string> needles) {
  expect_error([&] { parse(j); }, needles);
}

bool same_rope(const RopeConfig& a, const RopeConfig& b) {
  return a.theta == b.theta && a.type == b.type && a.factor == b.factor &&
         a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings;
}

TEST(Config, DemoModel) {
  ModelConfig c = load_model_config(kRoot / "models/demo-code-28m");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 8192);
  EXPECT_EQ(c.hidden_size, 512);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.group_size(), 4);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope.theta, 500000.0f);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{0});
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

// Checkpoints written by transformers itself (tests/fixtures/models).
TEST(Config, FixtureFamilies) {
  ModelConfig llama = load_model_config(kRoot / "tests/fixtures/models/tiny-llama3");
  EXPECT_EQ(llama.rope.type, "llama3");
  EXPECT_EQ(llama.rope.factor, 8.0f);
  EXPECT_EQ(llama.rope.original_max_position_embeddings, 64);
  ModelConfig qwen2 = load_model_config(kRoot / "tests/fixtures/models/tiny-qwen2");
  EXPECT_TRUE(qwen2.attention_bias);
  EXPECT_EQ(qwen2.head_dim, 16);  // null in the file: hidden / heads
  EXPECT_EQ(qwen2.sliding_window, 0);
  ModelConfig qwen3 = load_model_config(kRoot / "tests/fixtures/models/tiny-qwen3");
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_FALSE(qwen3.attention_bias);
  EXPECT_EQ(qwen3.head_dim, 32);
  ModelConfig mistral = load_model_config(kRoot / "tests/fixtures/models/tiny-mistral");
  EXPECT_EQ(mistral.model_type, "mistral");
  EXPECT_EQ(mistral.sliding_window, 0);
}

TEST(Config, ThreeRopeSpellingsAgree) {
  json flat = test::tiny_config_json();
  flat["rope_theta"] = 500000.0;
  flat["rope_scaling"] = {{"type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  json scaling_rope_type = flat;
  scaling_rope_type["rope_scaling"].erase("type");
  scaling_rope_type["rope_scaling"]["rope_type"] = "llama3";
  json nested = test::tiny_config_json();
  nested.erase("rope_theta");
  nested["rope_parameters"] = {{"rope_type", "llama3"},
                               {"rope_theta", 500000.0},
                               {"factor", 8.0},
                               {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 8192}};
  nested["rope_scaling"] = nullptr;

  RopeConfig a = parse(flat).rope, b = parse(scaling_rope_type).rope, c = parse(nested).rope;
  EXPECT_EQ(a.type, "llama3");
  EXPECT_EQ(a.theta, 500000.0f);
  EXPECT_EQ(a.factor, 8.0f);
  EXPECT_EQ(a.original_max_position_embeddings, 8192);
  EXPECT_TRUE(same_rope(a, b));
  EXPECT_TRUE(same_rope(a, c));

  json plain_flat = test::tiny_config_json();
  plain_flat["rope_theta"] = 1e6;
  json plain_nested = test::tiny_config_json();
  plain_nested.erase("rope_theta");
  plain_nested["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
  EXPECT_TRUE(same_rope(parse(plain_flat).rope, parse(plain_nested).rope));
  EXPECT_EQ(parse(plain_flat).rope.type, "default");

  json no_theta = test::tiny_config_json();
  no_theta.erase("rope_theta");
  EXPECT_EQ(parse(no_theta).rope.theta, 10000.0f);  // HF's default
}

TEST(Config, FamilyDefaults) {
  json qwen2 = test::tiny_config_json();
  qwen2["model_type"] = "qwen2";
  qwen2["attention_bias"] = false;  // ignored: Qwen2 always has q/k/v bias
  qwen2["sliding_window"] = 4096;   // ignored without use_sliding_window
  ModelConfig q2 = parse(qwen2);
  EXPECT_TRUE(q2.attention_bias);
  EXPECT_FALSE(q2.qk_norm);
  EXPECT_EQ(q2.sliding_window, 0);

  json qwen3 = test::tiny_config_json();
  qwen3["model_type"] = "qwen3";
  ModelConfig q3 = parse(qwen3);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.attention_bias);

  json mistral = test::tiny_config_json();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4096;
  mistral.erase("num_key_value_heads");
  mistral.erase("head_dim");
  mistral.erase("tie_word_embeddings");
  mistral.erase("rms_norm_eps");
  ModelConfig m = parse(mistral);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.num_kv_heads, 2);  // = num_attention_heads
  EXPECT_EQ(m.head_dim, 4);      // = hidden / heads
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_FALSE(m.attention_bias);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-6f);

  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(parse(mistral).sliding_window, 0);

  json llama_bias = test::tiny_config_json();
  llama_bias["attention_bias"] = true;
  EXPECT_TRUE(parse(llama_bias).attention_bias);
}

TEST(Config, QwenSlidingWindowFollowsMaxWindowLayers) {
  json qwen2 = test::tiny_config_json();
  qwen2["model_type"] = "qwen2";
  qwen2["use_sliding_window"] = true;
  qwen2["sliding_window"] = 32;
  qwen2["max_window_layers"] = 28;  // >= 2 layers: no layer slides
  EXPECT_EQ(parse(qwen2).sliding_window, 0);
  qwen2["max_window_layers"] = 0;
  EXPECT_EQ(parse(qwen2).sliding_window, 32);
  qwen2["max_window_layers"] = 1;
  expect_config_error(qwen2, {"config.json", "max_window_layers 1", "mixed"});
}

TEST(Config, LayerTypesMustBeUniform) {
  json j = test::tiny_config_json();
  j["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_NO_THROW(parse(j));
  j["layer_types"] = {"full_attention", "sliding_attention"};
  expect_config_error(j, {"config.json", "layer_types[1]", "sliding_attention"});
}

TEST(Config, EosIdsMergeWithGenerationConfig) {
  TempDir dir;
  json j = test::tiny_config_json();
  j["eos_token_id"] = {2, 5};
  test::write_file(dir / "config.json", j.dump());
  EXPECT_EQ(load_model_config(dir.path()).eos_token_ids, (std::vector<int>{2, 5}));
  test::write_file(dir / "generation_config.json", R"({"eos_token_id": [5, 7], "bos_token_id": 1})");
  ModelConfig c = load_model_config(dir.path());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2, 5, 7}));
  EXPECT_EQ(c.bos_token_id, 1);

  j["eos_token_id"] = nullptr;
  j["bos_token_id"] = nullptr;
  test::write_file(dir / "config.json", j.dump());
  test::write_file(dir / "generation_config.json", R"({"eos_token_id": 9})");
  c = load_model_config(dir.path());
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{9});
  EXPECT_EQ(c.bos_token_id, -1);
}

// --- bad inputs: each names the file and the field ---

TEST(BadConfig, MissingFile) {
  TempDir dir;
  expect_error([&] { load_model_config(dir.path()); },
               {(dir / "config.json").string(), "cannot open"});
}

TEST(BadConfig, MalformedJson) {
  TempDir dir;
  test::write_file(dir / "config.json", "{\n  \"model_type\": \"llama\",\n  \"vocab_size\": 16,,\n}");
  expect_error([&] { load_model_config(dir.path()); },
               {(dir / "config.json").string(), "not valid JSON", "line 3"});
}

TEST(BadConfig, MalformedGenerationConfig) {
  TempDir dir;
  test::write_file(dir / "config.json", test::tiny_config_json().dump());
  test::write_file(dir / "generation_config.json", "{\"eos_token_id\": [1, 2");
  expect_error([&] { load_model_config(dir.path()); },
               {(dir / "generation_config.json").string(), "not valid JSON"});
  test::write_file(dir / "generation_config.json", "{\"eos_token_id\": \"2\"}");
  expect_error([&] { load_model_config(dir.path()); },
               {"generation_config.json", "'eos_token_id' must be an integer, got string"});
}

TEST(BadConfig, NotAnObject) {
  expect_error([] { parse_model_config("[1, 2]", "config.json"); },
               {"config.json", "must be a JSON object, got array"});
}

TEST(BadConfig, MissingField) {
  for (const char* field : {"model_type", "vocab_size", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads",
                            "max_position_embeddings"}) {
    json j = test::tiny_config_json();
    j.erase(field);
    expect_config_error(j, {"config.json", "missing required field", std::string("'") + field + "'"});
  }
}

TEST(BadConfig, WrongType) {
  json j = test::tiny_config_json();
  j["hidden_size"] = "512";
  expect_config_error(j, {"config.json: field 'hidden_size' must be an integer, got string"});
  j = test::tiny_config_json();
  j["num_attention_heads"] = 2.5;
  expect_config_error(j, {"field 'num_attention_heads' must be an integer, got number"});
  j = test::tiny_config_json();
  j["tie_word_embeddings"] = "true";
  expect_config_error(j, {"field 'tie_word_embeddings' must be true or false, got string"});
  j = test::tiny_config_json();
  j["rms_norm_eps"] = "1e-5";
  expect_config_error(j, {"field 'rms_norm_eps' must be a number, got string"});
  j = test::tiny_config_json();
  j["eos_token_id"] = {1, "2"};
  expect_config_error(j, {"field 'eos_token_id' must be an integer, got string"});
  j = test::tiny_config_json();
  j["rope_scaling"] = "llama3";
  expect_config_error(j, {"field 'rope_scaling' must be an object, got string"});
  j = test::tiny_config_json();
  j["vocab_size"] = 1e12;
  expect_config_error(j, {"field 'vocab_size' must be an integer"});
  j = test::tiny_config_json();
  j["vocab_size"] = 5000000000LL;
  expect_config_error(j, {"field 'vocab_size' = 5000000000 does not fit"});
}

TEST(BadConfig, UnknownModelType) {
  json j = test::tiny_config_json();
  j["model_type"] = "gpt2";
  expect_config_error(j, {"config.json", "model_type 'gpt2'", "llama, mistral, qwen2, qwen3"});
}

TEST(BadConfig, UnsupportedRopeType) {
  json j = test::tiny_config_json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_config_error(j, {"config.json", "'rope_scaling.rope_type' is 'yarn'", "default, llama3"});
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_config_error(j, {"'rope_scaling.type' is 'dynamic'"});
  j = test::tiny_config_json();
  j["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 1e4}, {"factor", 2.0}};
  expect_config_error(j, {"'rope_parameters.rope_type' is 'linear'"});
  j = test::tiny_config_json();
  j["rope_scaling"] = {{"factor", 2.0}};
  expect_config_error(j, {"'rope_scaling.rope_type' is missing"});
}

TEST(BadConfig, IncompleteOrConflictingRope) {
  json j = test::tiny_config_json();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}};
  expect_config_error(j, {"missing required field 'rope_scaling.original_max_position_embeddings'"});
  j = test::tiny_config_json();
  j["rope_parameters"] = {{"rope_theta", 5e5}};
  expect_config_error(j, {"'rope_theta'", "'rope_parameters.rope_theta'", "disagree"});
  j = test::tiny_config_json();
  j["rope_theta"] = -1.0;
  expect_config_error(j, {"field 'rope_theta' must be a positive number"});
}

TEST(BadConfig, ImpossibleShapes) {
  json j = test::tiny_config_json();
  j["hidden_size"] = 0;
  expect_config_error(j, {"field 'hidden_size' must be positive, got 0"});
  j = test::tiny_config_json();
  j["num_hidden_layers"] = -2;
  expect_config_error(j, {"field 'num_hidden_layers' must be positive, got -2"});
  j = test::tiny_config_json();
  j["num_attention_heads"] = 3;
  j["num_key_value_heads"] = 2;
  expect_config_error(j, {"num_attention_heads 3 is not a multiple of num_key_value_heads 2"});
  j = test::tiny_config_json();
  j["num_key_value_heads"] = 4;
  expect_config_error(j, {"num_attention_heads 2 is not a multiple of num_key_value_heads 4"});
  j = test::tiny_config_json();
  j["head_dim"] = 5;
  expect_config_error(j, {"head_dim 5 must be even"});
  j = test::tiny_config_json();
  j.erase("head_dim");
  j["num_attention_heads"] = 3;
  j["num_key_value_heads"] = 3;
  expect_config_error(j, {"hidden_size 8 is not a multiple of num_attention_heads 3"});
}

TEST(BadConfig, UnsupportedFeatures) {
  json j = test::tiny_config_json();
  j["mlp_bias"] = true;
  expect_config_error(j, {"config.json", "'mlp_bias'"});
  j = test::tiny_config_json();
  j["hidden_act"] = "gelu";
  expect_config_error(j, {"config.json", "'hidden_act' is 'gelu'"});
}

}  // namespace
}  // namespace skim
