#include "model/tensor_shard.h"

#include <algorithm>

#include "core/error.h"

namespace skim {

namespace {

// Rows [begin, begin + n) of a [rows][cols] matrix.
Matrix rows_of(const Matrix& m, int begin, int n) {
  Matrix out;
  out.dtype = m.dtype;
  out.rows = n;
  out.cols = m.cols;
  const size_t from = size_t(begin) * m.cols, count = size_t(n) * m.cols;
  if (m.dtype == DType::BF16)
    out.bf16.assign(m.bf16.begin() + std::ptrdiff_t(from), m.bf16.begin() + std::ptrdiff_t(from + count));
  else
    out.f32.assign(m.f32.begin() + std::ptrdiff_t(from), m.f32.begin() + std::ptrdiff_t(from + count));
  return out;
}

// Rows [begin, begin + n) followed by zero rows up to `rows` in all.
Matrix padded_rows_of(const Matrix& m, int begin, int n, int rows) {
  Matrix out = rows_of(m, begin, n);
  out.rows = rows;
  if (m.dtype == DType::BF16)
    out.bf16.resize(size_t(rows) * m.cols, 0);
  else
    out.f32.resize(size_t(rows) * m.cols, 0.0f);
  return out;
}

// Columns [begin, begin + n) of a [rows][cols] matrix.
Matrix cols_of(const Matrix& m, int begin, int n) {
  Matrix out;
  out.dtype = m.dtype;
  out.rows = m.rows;
  out.cols = n;
  for (int r = 0; r < m.rows; ++r) {
    const size_t at = size_t(r) * m.cols + size_t(begin);
    if (m.dtype == DType::BF16)
      out.bf16.insert(out.bf16.end(), m.bf16.begin() + std::ptrdiff_t(at), m.bf16.begin() + std::ptrdiff_t(at + n));
    else
      out.f32.insert(out.f32.end(), m.f32.begin() + std::ptrdiff_t(at), m.f32.begin() + std::ptrdiff_t(at + n));
  }
  return out;
}

std::vector<float> slice(const std::vector<float>& v, size_t begin, size_t n) {
  if (v.empty()) return {};
  return std::vector<float>(v.begin() + std::ptrdiff_t(begin), v.begin() + std::ptrdiff_t(begin + n));
}

// Rank r's part of [0, total) cut in `size` slices of ceil(total / size) (the last ones shorter
// or empty): begin and length.
std::pair<int, int> even_slice(int total, int rank, int size) {
  const int per = (total + size - 1) / size;
  const int begin = std::min(total, rank * per);
  return {begin, std::min(total, begin + per) - begin};
}

}  // namespace

TensorShard plan_tensor_shard(const ModelConfig& c, int rank, int size) {
  SKIM_REQUIRE(size >= 1 && rank >= 0 && rank < size, "--tp: rank {} of {}", rank, size);
  SKIM_REQUIRE(c.num_heads % size == 0,
               "--tp {}: the model's {} attention heads (num_attention_heads) do not split over {} ranks", size,
               c.num_heads, size);
  SKIM_REQUIRE(c.num_kv_heads % size == 0 || size % c.num_kv_heads == 0,
               "--tp {}: the model's {} KV heads (num_key_value_heads) neither split over {} ranks nor replicate "
               "evenly on them (one must divide the other)",
               size, c.num_kv_heads, size);
  TensorShard s;
  s.rank = rank;
  s.size = size;
  s.q_heads = c.num_heads / size;
  s.q_head_begin = rank * s.q_heads;
  const int group = c.group_size();
  if (size <= c.num_kv_heads) {  // whole groups per rank
    s.kv_heads = c.num_kv_heads / size;
    s.kv_head_begin = rank * s.kv_heads;
    s.attn_head_begin = s.q_head_begin;
    s.attn_heads = s.q_heads;
  } else {  // one KV head, replicated on the ranks that share its group
    s.kv_group_ranks = size / c.num_kv_heads;
    s.kv_heads = 1;
    s.kv_head_begin = rank / s.kv_group_ranks;
    s.attn_head_begin = s.kv_head_begin * group;
    s.attn_heads = group;
  }
  std::tie(s.inter_begin, s.inter) = even_slice(c.intermediate_size, rank, size);
  std::tie(s.vocab_begin, s.vocab) = even_slice(c.vocab_size, rank, size);
  s.vocab_stride = (c.vocab_size + size - 1) / size;
  return s;
}

ModelConfig shard_config(const ModelConfig& full, const TensorShard& s) {
  ModelConfig c = full;
  c.num_heads = s.attn_heads;
  c.num_kv_heads = s.kv_heads;
  c.intermediate_size = s.inter;
  return c;
}

std::unique_ptr<Model> shard_model(const Model& full, const TensorShard& s) {
  const ModelConfig& c = full.config;
  const int d = c.head_dim;
  auto m = std::make_unique<Model>();
  m->dir = full.dir;
  m->config = shard_config(c, s);
  m->rope_inv_freq = full.rope_inv_freq;

  const ModelWeights& w = full.weights;
  ModelWeights& o = m->weights;
  o.embed = padded_rows_of(w.embed, s.vocab_begin, s.vocab, s.vocab_stride);
  if (!w.lm_head.empty()) o.lm_head = padded_rows_of(w.lm_head, s.vocab_begin, s.vocab, s.vocab_stride);
  o.final_norm = w.final_norm;
  const size_t q0 = size_t(s.q_head_begin) * d, nq = size_t(s.q_heads) * d;
  const size_t k0 = size_t(s.kv_head_begin) * d, nk = size_t(s.kv_heads) * d;
  for (const LayerWeights& l : w.layers) {
    LayerWeights x;
    x.attn_norm = l.attn_norm;
    x.mlp_norm = l.mlp_norm;
    x.wq = rows_of(l.wq, int(q0), int(nq));
    x.wk = rows_of(l.wk, int(k0), int(nk));
    x.wv = rows_of(l.wv, int(k0), int(nk));
    x.wo = cols_of(l.wo, int(q0), int(nq));
    x.bq = slice(l.bq, q0, nq);
    x.bk = slice(l.bk, k0, nk);
    x.bv = slice(l.bv, k0, nk);
    x.q_norm = l.q_norm;  // per head_dim: every head's
    x.k_norm = l.k_norm;
    x.w_gate = rows_of(l.w_gate, s.inter_begin, s.inter);
    x.w_up = rows_of(l.w_up, s.inter_begin, s.inter);
    x.w_down = cols_of(l.w_down, s.inter_begin, s.inter);
    o.layers.push_back(std::move(x));
  }
  return m;
}

}  // namespace skim
