// Builds model directories for the loading tests: safetensors files from a list of tensors,
// config.json text, a tiny complete Llama-family checkpoint. Bad inputs are made by editing
// these, so no binary fixture is committed.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/config.h"

namespace skim::test {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "skim-model-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

struct FakeTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  std::vector<float> values;  // numel values; empty means 0, 1, 2, ... scaled by 1/64
};

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline std::string encode(const FakeTensor& t) {
  int64_t n = numel_of(t.shape);
  std::string bytes(size_t(n) * dtype_size(t.dtype), '\0');
  for (int64_t i = 0; i < n; ++i) {
    float v = t.values.empty() ? float(i % 256) / 64.0f : t.values.at(size_t(i));
    char* dst = bytes.data() + size_t(i) * dtype_size(t.dtype);
    if (t.dtype == DType::F32) {
      std::memcpy(dst, &v, 4);
    } else {
      uint16_t h = t.dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(dst, &h, 2);
    }
  }
  return bytes;
}

// A safetensors file from a JSON header and the data region, exactly as given: the tool for
// headers that lie. The header is padded with spaces to 8 bytes, as the format's writers do.
inline std::string safetensors_raw(std::string header, const std::string& data) {
  while (header.size() % 8) header += ' ';
  std::string out(8, '\0');
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((len >> (8 * i)) & 0xff);
  return out + header + data;
}

// A well-formed safetensors file holding `tensors` back to back.
inline std::string safetensors_bytes(const std::vector<FakeTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const FakeTensor& t : tensors) {
    std::string bytes = encode(t);
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  return safetensors_raw(header.dump(), data);
}

// A small llama config (2 layers, GQA 2:1, tied embeddings) whose fields tests override.
inline nlohmann::json tiny_config_json() {
  return {{"model_type", "llama"},
          {"vocab_size", 16},
          {"hidden_size", 8},
          {"intermediate_size", 12},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"head_dim", 4},
          {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", true},
          {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

// Every tensor a checkpoint of config `c` holds, named as Hugging Face names them.
inline std::vector<FakeTensor> tensors_for(const ModelConfig& c, DType dtype = DType::BF16) {
  std::vector<FakeTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    t.push_back({std::move(name), std::move(shape), dtype, {}});
  };
  int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size;
  add("model.embed_tokens.weight", {c.vocab_size, h});
  for (int l = 0; l < c.num_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {q, h});
    add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h});
    add(p + "self_attn.o_proj.weight", {h, q});
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {c.head_dim});
      add(p + "self_attn.k_norm.weight", {c.head_dim});
    }
    add(p + "mlp.gate_proj.weight", {ff, h});
    add(p + "mlp.up_proj.weight", {ff, h});
    add(p + "mlp.down_proj.weight", {h, ff});
  }
  add("model.norm.weight", {h});
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h});
  return t;
}

// Writes config.json and model.safetensors for `config` into `dir`; `edit` may change the
// tensor list first (drop one, reshape one, add one).
inline ModelConfig write_model(const fs::path& dir, const nlohmann::json& config,
                               const std::function<void(std::vector<FakeTensor>&)>& edit = {}) {
  write_file(dir / "config.json", config.dump(2));
  ModelConfig c = parse_model_config(config.dump(), "config.json");
  std::vector<FakeTensor> tensors = tensors_for(c);
  if (edit) edit(tensors);
  write_file(dir / "model.safetensors", safetensors_bytes(tensors));
  return c;
}

// Asserts that `body` throws skim::Error whose message contains every one of `needles`.
template <typename Body>
void expect_error(Body&& body, std::initializer_list<std::string> needles) {
  try {
    body();
    ADD_FAILURE() << "expected skim::Error, nothing was thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
  }
}

}  // namespace skim::test
