// The model's weights on the GPU, bf16, uploaded once: Q/K/V fused into one [q+2kv][hidden]
// matrix and gate/up into one [2I][hidden], so a layer runs four projections. Norm weights,
// biases and RoPE frequencies stay fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "model/config.h"

namespace skim {
struct Model;
}

namespace skim::cuda {

struct GpuMatrix {
  DeviceBuffer<uint16_t> data;  // bf16 [rows][cols], a Linear weight [out][in]
  int rows = 0, cols = 0;
};

struct GpuLayer {
  DeviceBuffer<float> attn_norm, mlp_norm;
  GpuMatrix wqkv, wo, w_gate_up, w_down;
  DeviceBuffer<float> qkv_bias;        // empty unless attention_bias
  DeviceBuffer<float> q_norm, k_norm;  // empty unless qk_norm
};

struct GpuWeights {
  ModelConfig config;
  GpuMatrix embed;
  GpuMatrix lm_head;  // empty when tied to embed
  DeviceBuffer<float> final_norm;
  DeviceBuffer<float> inv_freq;  // [head_dim / 2], llama3 scaling applied
  std::vector<GpuLayer> layers;

  const GpuMatrix& output() const { return lm_head.rows ? lm_head : embed; }
  size_t bytes() const;  // all device bytes held
};

// Uploads a loaded model (fp16/fp32 checkpoints are rounded to bf16).
GpuWeights upload_weights(const Model& model);

// Random weights of a config's shape, generated on the device (benchmarks of model shapes
// whose checkpoints are not at hand): projections uniform in +-1/sqrt(in), norms 1. The
// embedding and LM head hold `vocab_rows` rows (0: the vocabulary; a tensor-parallel rank's
// slice: its vocab_stride).
GpuWeights random_weights(const ModelConfig& config, uint64_t seed, int vocab_rows = 0);

}  // namespace skim::cuda
