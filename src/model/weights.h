// The model's weights, checked against its config: every expected tensor present with the
// right shape, no unexpected ones. Matrices keep bf16 storage when the checkpoint is bf16
// (exactly representable in fp32, so compute is still fp32 on the same values, with half the
// bytes to stream per decode step); fp16 and fp32 checkpoints are held as fp32.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"

namespace skim {

// A dense matrix [rows][cols] (a Linear weight is [out][in], as in the checkpoint), stored as
// bf16 or fp32.
struct Matrix {
  DType dtype = DType::F32;  // F32 or BF16
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  int rows = 0, cols = 0;

  bool empty() const { return rows == 0; }
  float at(size_t i) const { return dtype == DType::BF16 ? bf16_to_f32(bf16[i]) : f32[i]; }
  // Row r as fp32 into `out` (cols values).
  void row(int r, float* out) const;
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

  const Matrix& output() const { return lm_head.empty() ? embed : lm_head; }
};

// Loads and validates every tensor of the model directory against `config`.
// Throws skim::Error naming the tensor and the file on a missing or extra tensor, a wrong shape
// or an unsupported dtype.
ModelWeights load_weights(const std::filesystem::path& model_dir, const ModelConfig& config);

}  // namespace skim
