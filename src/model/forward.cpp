#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace skim {

CpuForward::CpuForward(const Model& model, PagedKVCache& cache) : model_(model), cache_(cache) {}

void CpuForward::ensure_capacity(int rows) {
  if (rows <= capacity_) return;
  const ModelConfig& c = model_.config;
  size_t n = size_t(rows);
  x_.resize(n * c.hidden_size);
  h_.resize(n * c.hidden_size);
  q_.resize(n * c.q_dim());
  q_pre_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  attn_.resize(n * c.q_dim());
  gate_.resize(n * c.intermediate_size);
  up_.resize(n * c.intermediate_size);
  capacity_ = rows;
}

void CpuForward::run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) {
  const ModelConfig& c = model_.config;
  const int n = int(batch.tokens.size());
  SKIM_REQUIRE(n > 0 && batch.positions.size() == size_t(n) && batch.tables.size() == size_t(n),
               "forward: malformed batch");
  ensure_capacity(n);

  for (int r = 0; r < n; ++r) {
    int t = batch.tokens[r];
    SKIM_REQUIRE(t >= 0 && t < c.vocab_size, "token id {} out of range [0, {})", t, c.vocab_size);
    model_.weights.embed.row(t, x_.data() + size_t(r) * c.hidden_size);
  }
  for (int l = 0; l < c.num_layers; ++l) layer(l, batch, n, policy);

  const int nl = int(batch.logits_rows.size());
  logits.resize(size_t(nl) * c.vocab_size);
  final_.resize(size_t(nl) * c.hidden_size);  // a row may be asked for more than once
  for (int i = 0; i < nl; ++i) {
    const int row = batch.logits_rows[i];
    SKIM_REQUIRE(row >= 0 && row < n, "forward: logits row {} outside the batch of {}", row, n);
    cpu::rmsnorm(x_.data() + size_t(row) * c.hidden_size, model_.weights.final_norm.data(),
                 final_.data() + size_t(i) * c.hidden_size, 1, c.hidden_size, c.rms_norm_eps);
  }
  if (nl > 0) {
    const Matrix& out = model_.weights.output();
    cpu::linear(final_.data(), out, nullptr, logits.data(), nl);
  }
}

void CpuForward::layer(int l, const ForwardBatch& batch, int n, AttentionPolicy& policy) {
  const ModelConfig& c = model_.config;
  const LayerWeights& w = model_.weights.layers[size_t(l)];
  const int H = c.hidden_size, d = c.head_dim;
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };

  cpu::rmsnorm(x_.data(), w.attn_norm.data(), h_.data(), n, H, c.rms_norm_eps);
  cpu::linear(h_.data(), w.wq, bias(w.bq), q_.data(), n);
  cpu::linear(h_.data(), w.wk, bias(w.bk), k_.data(), n);
  cpu::linear(h_.data(), w.wv, bias(w.bv), v_.data(), n);
  if (c.qk_norm) {  // Qwen3: RMSNorm over each head's vector before RoPE
    cpu::rmsnorm(q_.data(), w.q_norm.data(), q_.data(), n * c.num_heads, d, c.rms_norm_eps);
    cpu::rmsnorm(k_.data(), w.k_norm.data(), k_.data(), n * c.num_kv_heads, d, c.rms_norm_eps);
  }
  std::copy_n(q_.data(), size_t(n) * c.q_dim(), q_pre_.data());
  const float* inv_freq = model_.rope_inv_freq.data();
  cpu::rope(q_.data(), batch.positions.data(), inv_freq, n, c.num_heads, d);
  cpu::rope(k_.data(), batch.positions.data(), inv_freq, n, c.num_kv_heads, d);

  for (int r = 0; r < n; ++r)
    cache_.write(l, *batch.tables[r], batch.positions[r], k_.data() + size_t(r) * c.kv_dim(),
                 v_.data() + size_t(r) * c.kv_dim());

  AttentionBatch ab;
  ab.layer = l;
  ab.num_rows = n;
  ab.num_heads = c.num_heads;
  ab.num_kv_heads = c.num_kv_heads;
  ab.head_dim = d;
  ab.scale = 1.0f / std::sqrt(float(d));
  ab.decode = batch.decode;
  ab.kv = cache_.layer(l);
  ab.positions = batch.positions.data();
  ab.tables = batch.tables.data();
  ab.q = q_.data();
  ab.q_pre = q_pre_.data();
  ab.out = attn_.data();
  ab.retro_step = batch.retro_step.empty() ? nullptr : batch.retro_step.data();
  policy.attend(ab);

  cpu::linear(attn_.data(), w.wo, nullptr, h_.data(), n);
  cpu::add_inplace(x_.data(), h_.data(), int64_t(n) * H);

  cpu::rmsnorm(x_.data(), w.mlp_norm.data(), h_.data(), n, H, c.rms_norm_eps);
  const int I = c.intermediate_size;
  cpu::linear(h_.data(), w.w_gate, nullptr, gate_.data(), n);
  cpu::linear(h_.data(), w.w_up, nullptr, up_.data(), n);
  cpu::silu_mul(gate_.data(), up_.data(), gate_.data(), int64_t(n) * I);
  cpu::linear(gate_.data(), w.w_down, nullptr, h_.data(), n);
  cpu::add_inplace(x_.data(), h_.data(), int64_t(n) * H);
}

}  // namespace skim
