// The model's weights, checked against its config: every expected tensor present with the
// right shape, no unexpected ones. On the CPU they are kept as fp32 copies (compute is fp32).
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"

namespace skim {

// A dense fp32 matrix [rows][cols] (a Linear weight is [out][in], as in the checkpoint).
struct Matrix {
  std::vector<float> data;
  int rows = 0, cols = 0;
  const float* row(int r) const { return data.data() + size_t(r) * cols; }
};

struct LayerWeights {
  std::vector<float> attn_norm, mlp_norm;  // [hidden]
  Matrix wq, wk, wv, wo;                   // [q_dim][hidden], [kv_dim][hidden] x2, [hidden][q_dim]
  std::vector<float> bq, bk, bv;           // empty unless attention_bias
  std::vector<float> q_norm, k_norm;       // [head_dim], empty unless qk_norm
  Matrix w_gate, w_up, w_down;             // [inter][hidden] x2, [hidden][inter]
};

struct ModelWeights {
  Matrix embed;    // [vocab][hidden]
  Matrix lm_head;  // [vocab][hidden]; empty when tied to embed
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;

  const Matrix& output() const { return lm_head.data.empty() ? embed : lm_head; }
};

// Loads and validates every tensor of the model directory against `config`.
// Throws skim::Error naming the tensor and the file on a missing or extra tensor, a wrong shape
// or an unsupported dtype.
ModelWeights load_weights(const std::filesystem::path& model_dir, const ModelConfig& config);

}  // namespace skim
