#include "backend/cuda/gpu_weights.h"

#include <cmath>

#include "backend/cpu/ops.h"
#include "backend/cuda/ops.cuh"
#include "core/dtype.h"
#include "model/model.h"

namespace skim::cuda {

namespace {

// Rows of several host matrices stacked into one bf16 device matrix.
GpuMatrix stack(std::initializer_list<const Matrix*> parts) {
  GpuMatrix m;
  m.cols = (*parts.begin())->cols;
  for (const Matrix* p : parts) m.rows += p->rows;
  std::vector<uint16_t> host;
  host.reserve(size_t(m.rows) * m.cols);
  for (const Matrix* p : parts) {
    if (p->dtype == DType::BF16) {
      host.insert(host.end(), p->bf16.begin(), p->bf16.end());
    } else {
      for (float f : p->f32) host.push_back(f32_to_bf16(f));
    }
  }
  upload(m.data, host.data(), host.size());
  return m;
}

DeviceBuffer<float> floats(const std::vector<float>& v) {
  DeviceBuffer<float> b;
  if (!v.empty()) upload(b, v.data(), v.size());
  return b;
}

std::vector<float> concat(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c) {
  std::vector<float> out(a);
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

DeviceBuffer<float> inv_freq_of(const ModelConfig& c) {
  std::vector<float> f(size_t(c.head_dim / 2));
  rope_inv_freq(c.rope, c.head_dim, f.data());
  return floats(f);
}

}  // namespace

size_t GpuWeights::bytes() const {
  size_t b = embed.data.bytes() + lm_head.data.bytes() + final_norm.bytes() + inv_freq.bytes();
  for (const GpuLayer& l : layers)
    b += l.attn_norm.bytes() + l.mlp_norm.bytes() + l.wqkv.data.bytes() + l.wo.data.bytes() +
         l.w_gate_up.data.bytes() + l.w_down.data.bytes() + l.qkv_bias.bytes() + l.q_norm.bytes() +
         l.k_norm.bytes();
  return b;
}

GpuWeights upload_weights(const Model& model) {
  const ModelWeights& w = model.weights;
  GpuWeights g;
  g.config = model.config;
  g.embed = stack({&w.embed});
  if (!w.lm_head.empty()) g.lm_head = stack({&w.lm_head});
  g.final_norm = floats(w.final_norm);
  g.inv_freq = floats(model.rope_inv_freq);
  for (const LayerWeights& l : w.layers) {
    GpuLayer d;
    d.attn_norm = floats(l.attn_norm);
    d.mlp_norm = floats(l.mlp_norm);
    d.wqkv = stack({&l.wq, &l.wk, &l.wv});
    d.wo = stack({&l.wo});
    d.w_gate_up = stack({&l.w_gate, &l.w_up});
    d.w_down = stack({&l.w_down});
    if (!l.bq.empty()) d.qkv_bias = floats(concat(l.bq, l.bk, l.bv));
    d.q_norm = floats(l.q_norm);
    d.k_norm = floats(l.k_norm);
    g.layers.push_back(std::move(d));
  }
  return g;
}

GpuWeights random_weights(const ModelConfig& c, uint64_t seed, int vocab_rows) {
  if (vocab_rows <= 0) vocab_rows = c.vocab_size;
  GpuWeights g;
  g.config = c;
  auto matrix = [&](int rows, int cols) {
    GpuMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.data.resize(size_t(rows) * cols);
    fill_random_bf16(m.data.data(), m.data.size(), seed++, 1.0f / std::sqrt(float(cols)), nullptr);
    return m;
  };
  auto ones = [](int n) {
    DeviceBuffer<float> b{size_t(n)};
    fill_f32(b.data(), b.size(), 1.0f, nullptr);
    return b;
  };
  g.embed = matrix(vocab_rows, c.hidden_size);
  if (!c.tie_word_embeddings) g.lm_head = matrix(vocab_rows, c.hidden_size);
  g.final_norm = ones(c.hidden_size);
  g.inv_freq = inv_freq_of(c);
  for (int l = 0; l < c.num_layers; ++l) {
    GpuLayer d;
    d.attn_norm = ones(c.hidden_size);
    d.mlp_norm = ones(c.hidden_size);
    d.wqkv = matrix(c.q_dim() + 2 * c.kv_dim(), c.hidden_size);
    d.wo = matrix(c.hidden_size, c.q_dim());
    d.w_gate_up = matrix(2 * c.intermediate_size, c.hidden_size);
    d.w_down = matrix(c.hidden_size, c.intermediate_size);
    if (c.attention_bias) {
      d.qkv_bias.resize(size_t(c.q_dim() + 2 * c.kv_dim()));
      fill_f32(d.qkv_bias.data(), d.qkv_bias.size(), 0.0f, nullptr);
    }
    if (c.qk_norm) {
      d.q_norm = ones(c.head_dim);
      d.k_norm = ones(c.head_dim);
    }
    g.layers.push_back(std::move(d));
  }
  check(cudaDeviceSynchronize(), "random weights");
  return g;
}

}  // namespace skim::cuda
