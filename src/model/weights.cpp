#include "model/weights.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"

namespace skim {

namespace {

namespace fs = std::filesystem;

std::string file_name(const TensorView& v) { return fs::path(v.file).filename().string(); }

// Converts to fp32, in parallel for big tensors. The mapping gives no alignment guarantee
// (the JSON header has any length), so misaligned 16-bit data is copied out first.
void convert(const TensorView& v, float* dst) {
  size_t n = size_t(v.numel());
  const auto* src = static_cast<const uint8_t*>(v.data);
  size_t elem = dtype_size(v.dtype);
  constexpr size_t kChunk = size_t(1) << 16;
  size_t chunks = (n + kChunk - 1) / kChunk;
  bool aligned = reinterpret_cast<uintptr_t>(src) % elem == 0;
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (size_t c = 0; c < chunks; ++c) {
    size_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    if (aligned) {
      to_f32(v.dtype, src + begin * elem, dst + begin, count);
    } else {
      std::vector<uint8_t> tmp(count * elem);
      std::memcpy(tmp.data(), src + begin * elem, tmp.size());
      to_f32(v.dtype, tmp.data(), dst + begin, count);
    }
  }
}

// Takes tensors from the store by name, checking shapes against the config and remembering
// which were used so that leftovers can be reported.
class Loader {
 public:
  explicit Loader(const fs::path& dir) : dir_(dir), store_(dir) {}

  const TensorView& view(const std::string& name, const std::vector<int64_t>& expected) {
    if (!store_.has(name)) {
      const auto& all = store_.all();
      fail("{}: tensor '{}' is missing from the checkpoint ({} tensors, the first being '{}')",
           dir_.string(), name, all.size(), all.empty() ? "" : all.begin()->first);
    }
    const TensorView& v = store_.get(name);
    SKIM_REQUIRE(v.shape == expected, "{} in {}: shape [{}], config expects [{}]", name,
                 file_name(v), fmt::join(v.shape, ", "), fmt::join(expected, ", "));
    used_.insert(name);
    return v;
  }

  Matrix matrix(const std::string& name, int rows, int cols) {
    const TensorView& v = view(name, {rows, cols});
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    size_t n = size_t(rows) * size_t(cols);
    if (v.dtype == DType::BF16) {
      m.dtype = DType::BF16;
      m.bf16.resize(n);
      std::memcpy(m.bf16.data(), v.data, n * sizeof(uint16_t));  // the mapping may be unaligned
    } else {
      m.f32.resize(n);
      convert(v, m.f32.data());
    }
    return m;
  }

  std::vector<float> values(const std::string& name, int n) {
    const TensorView& v = view(name, {n});
    std::vector<float> out(static_cast<size_t>(n));
    convert(v, out.data());
    return out;
  }

  bool has(const std::string& name) const { return store_.has(name); }

  // Every tensor not consumed is an error, except buffers some exporters save that carry no
  // weights (RoPE frequencies are recomputed from the config).
  void reject_leftovers() const {
    std::vector<std::string> extra;
    for (const auto& [name, v] : store_.all()) {
      bool harmless = name.ends_with(".rotary_emb.inv_freq");
      if (!used_.count(name) && !harmless)
        extra.push_back(fmt::format("'{}' in {}", name, file_name(*v)));
    }
    if (extra.empty()) return;
    size_t shown = std::min<size_t>(extra.size(), 5);
    fail("{}: {} unexpected tensor{} for this config: {}{}", dir_.string(), extra.size(),
         extra.size() == 1 ? "" : "s",
         fmt::join(extra.begin(), extra.begin() + std::ptrdiff_t(shown), ", "),
         extra.size() > shown ? ", ..." : "");
  }

 private:
  fs::path dir_;
  TensorStore store_;
  std::set<std::string> used_;
};

LayerWeights load_layer(Loader& in, const ModelConfig& c, int layer) {
  std::string p = fmt::format("model.layers.{}.", layer);
  int h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size;
  LayerWeights w;
  w.attn_norm = in.values(p + "input_layernorm.weight", h);
  w.mlp_norm = in.values(p + "post_attention_layernorm.weight", h);
  w.wq = in.matrix(p + "self_attn.q_proj.weight", q, h);
  w.wk = in.matrix(p + "self_attn.k_proj.weight", kv, h);
  w.wv = in.matrix(p + "self_attn.v_proj.weight", kv, h);
  w.wo = in.matrix(p + "self_attn.o_proj.weight", h, q);
  if (c.attention_bias) {
    w.bq = in.values(p + "self_attn.q_proj.bias", q);
    w.bk = in.values(p + "self_attn.k_proj.bias", kv);
    w.bv = in.values(p + "self_attn.v_proj.bias", kv);
  }
  if (c.qk_norm) {
    w.q_norm = in.values(p + "self_attn.q_norm.weight", c.head_dim);
    w.k_norm = in.values(p + "self_attn.k_norm.weight", c.head_dim);
  }
  w.w_gate = in.matrix(p + "mlp.gate_proj.weight", ff, h);
  w.w_up = in.matrix(p + "mlp.up_proj.weight", ff, h);
  w.w_down = in.matrix(p + "mlp.down_proj.weight", h, ff);
  return w;
}

}  // namespace

void Matrix::row(int r, float* out) const {
  size_t at = size_t(r) * size_t(cols);
  if (dtype == DType::BF16) {
    to_f32(DType::BF16, bf16.data() + at, out, size_t(cols));
  } else {
    std::memcpy(out, f32.data() + at, size_t(cols) * sizeof(float));
  }
}

ModelWeights load_weights(const fs::path& model_dir, const ModelConfig& config) {
  Loader in(model_dir);
  ModelWeights w;
  w.embed = in.matrix("model.embed_tokens.weight", config.vocab_size, config.hidden_size);
  for (int l = 0; l < config.num_layers; ++l) w.layers.push_back(load_layer(in, config, l));
  w.final_norm = in.values("model.norm.weight", config.hidden_size);

  const std::string head = "lm_head.weight";
  if (!config.tie_word_embeddings) {
    w.lm_head = in.matrix(head, config.vocab_size, config.hidden_size);
  } else if (in.has(head)) {
    // Tied, yet the checkpoint also stores lm_head (some exporters write the tied tensor
    // twice). transformers ties after loading, so the embedding wins and this copy is
    // ignored; we do the same, checking only its shape so a mislabelled file still fails.
    in.view(head, {config.vocab_size, config.hidden_size});
  }
  in.reject_leftovers();
  return w;
}

}  // namespace skim
