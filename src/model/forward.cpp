#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"
#include "core/error.h"
#include "model/llama_forward.h"

namespace skim {

namespace {

const float* bias(const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); }

}  // namespace

std::vector<int32_t> Forward::run_sampled(const ForwardBatch&, AttentionPolicy&, std::span<const SampleParams>,
                                          std::span<const int32_t>, std::vector<TokenLogprob>*) {
  throw Error("internal: run_sampled on a backend that samples on the host (check samples_on_device())");
}

int Forward::acquire_policy(const std::string&) {
  throw Error("internal: acquire_policy on a backend that runs one policy (check mixes_policies())");
}
void Forward::release_policy(int) {
  throw Error("internal: release_policy on a backend that runs one policy (check mixes_policies())");
}

CpuForward::CpuForward(const Model& model, PagedKVCache& cache) : model_(model), cache_(cache) {}

void CpuForward::ensure_capacity(int rows) {
  if (rows <= capacity_) return;
  const ModelConfig& c = model_.config;
  size_t n = size_t(rows);
  x_.resize(n * c.hidden_size);
  y_.resize(n * c.hidden_size);
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
  for (int t : batch.tokens)
    SKIM_REQUIRE(t >= 0 && t < c.vocab_size, "token id {} out of range [0, {})", t, c.vocab_size);
  for (int r : batch.logits_rows)
    SKIM_REQUIRE(r >= 0 && r < n, "forward: logits row {} outside the batch of {}", r, n);
  ensure_capacity(n);
  batch_ = &batch;
  policy_ = &policy;
  logits_ = &logits;
  const int nl = int(batch.logits_rows.size());
  logits.resize(size_t(nl) * c.vocab_size);
  llama_forward(*this, c, n, nl);
  batch_ = nullptr;
  policy_ = nullptr;
  logits_ = nullptr;
}

void CpuForward::embed(int n) {
  const int H = model_.config.hidden_size;
  for (int r = 0; r < n; ++r) model_.weights.embed.row(batch_->tokens[size_t(r)], x_.data() + size_t(r) * H);
}

void CpuForward::add_rmsnorm(int n, int layer, NormWeight weight, bool residual) {
  const ModelConfig& c = model_.config;
  const int H = c.hidden_size;
  if (residual) cpu::add_inplace(x_.data(), y_.data(), int64_t(n) * H);
  const std::vector<float>& w = weight == NormWeight::final ? model_.weights.final_norm
                                : weight == NormWeight::attn ? model_.weights.layers[size_t(layer)].attn_norm
                                                             : model_.weights.layers[size_t(layer)].mlp_norm;
  cpu::rmsnorm(x_.data(), w.data(), h_.data(), n, H, c.rms_norm_eps);
}

void CpuForward::linear(int n, int layer, Projection p) {
  const LayerWeights& w = model_.weights.layers[size_t(layer)];
  switch (p) {
    case Projection::qkv:
      cpu::linear(h_.data(), w.wq, bias(w.bq), q_.data(), n);
      cpu::linear(h_.data(), w.wk, bias(w.bk), k_.data(), n);
      cpu::linear(h_.data(), w.wv, bias(w.bv), v_.data(), n);
      return;
    case Projection::o:
      cpu::linear(attn_.data(), w.wo, nullptr, y_.data(), n);
      return;
    case Projection::gate_up:
      cpu::linear(h_.data(), w.w_gate, nullptr, gate_.data(), n);
      cpu::linear(h_.data(), w.w_up, nullptr, up_.data(), n);
      return;
    case Projection::down:
      cpu::linear(gate_.data(), w.w_down, nullptr, y_.data(), n);  // gate_ holds inter (silu_mul)
      return;
  }
}

void CpuForward::qkv_rope_append(int n, int layer) {
  const ModelConfig& c = model_.config;
  const LayerWeights& w = model_.weights.layers[size_t(layer)];
  const int d = c.head_dim;
  if (c.qk_norm) {  // Qwen3: RMSNorm over each head's vector before RoPE
    cpu::rmsnorm(q_.data(), w.q_norm.data(), q_.data(), n * c.num_heads, d, c.rms_norm_eps);
    cpu::rmsnorm(k_.data(), w.k_norm.data(), k_.data(), n * c.num_kv_heads, d, c.rms_norm_eps);
  }
  std::copy_n(q_.data(), size_t(n) * c.q_dim(), q_pre_.data());
  const float* inv_freq = model_.rope_inv_freq.data();
  const int32_t* positions = batch_->positions.data();
  cpu::rope(q_.data(), positions, inv_freq, n, c.num_heads, d);
  cpu::rope(k_.data(), positions, inv_freq, n, c.num_kv_heads, d);
  for (int r = 0; r < n; ++r)  // the cache keeps the pages' digests as it writes
    cache_.write(layer, *batch_->tables[size_t(r)], positions[r], k_.data() + size_t(r) * c.kv_dim(),
                 v_.data() + size_t(r) * c.kv_dim());
}

void CpuForward::attention(int n, int layer) {
  const ModelConfig& c = model_.config;
  const ForwardBatch& b = *batch_;
  AttentionBatch ab{.layer = layer,
                    .num_rows = n,
                    .num_heads = c.num_heads,
                    .num_kv_heads = c.num_kv_heads,
                    .head_dim = c.head_dim,
                    .scale = 1.0f / std::sqrt(float(c.head_dim)),
                    .decode = b.decode,
                    .kv = cache_.layer(layer),
                    .positions = b.positions.data(),
                    .tables = b.tables.data(),
                    .q = q_.data(),
                    .q_pre = q_pre_.data(),
                    .out = attn_.data(),
                    .retro_step = b.retro_step.empty() ? nullptr : b.retro_step.data()};
  policy_->attend(ab);
}

void CpuForward::silu_mul(int n) {
  cpu::silu_mul(gate_.data(), up_.data(), gate_.data(), int64_t(n) * model_.config.intermediate_size);
}

void CpuForward::logits(int n_logits) {
  const int H = model_.config.hidden_size;
  final_.resize(size_t(n_logits) * H);  // a row may be asked for more than once
  for (int i = 0; i < n_logits; ++i)
    std::copy_n(h_.data() + size_t(batch_->logits_rows[size_t(i)]) * H, H, final_.data() + size_t(i) * H);
  cpu::linear(final_.data(), model_.weights.output(), nullptr, logits_->data(), n_logits);
}

}  // namespace skim
