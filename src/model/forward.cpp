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
void Forward::run_by_layer(std::span<const ForwardBatch>, std::vector<std::vector<float>>&) {
  throw Error("internal: run_by_layer on a backend that prefills chunk by chunk (check runs_prompts_by_layer())");
}

std::vector<int> marked_first(const std::vector<bool>& first) {
  std::vector<int> order;
  for (bool marked : {true, false})
    for (size_t r = 0; r < first.size(); ++r)
      if (first[r] == marked) order.push_back(int(r));
  return order;
}

int rows_first(const ForwardBatch& batch, const std::vector<bool>& first, ForwardBatch& ordered, bool& moved) {
  const size_t n = batch.tokens.size();
  SKIM_REQUIRE(first.size() == n, "internal: rows_first with {} marks for {} rows", first.size(), n);
  const std::vector<int> order = marked_first(first);
  moved = false;
  for (size_t i = 0; i < n; ++i) moved |= order[i] != int(i);
  const int count = int(std::count(first.begin(), first.end(), true));
  if (!moved) return count;
  std::vector<int> at(n);  // batch row -> its place in `ordered`
  ordered = ForwardBatch{};
  ordered.decode = batch.decode;
  for (size_t i = 0; i < n; ++i) {
    const size_t r = size_t(order[i]);
    at[r] = int(i);
    ordered.tokens.push_back(batch.tokens[r]);
    ordered.positions.push_back(batch.positions[r]);
    ordered.tables.push_back(batch.tables[r]);
    if (!batch.retro_step.empty()) ordered.retro_step.push_back(batch.retro_step[r]);
    if (!batch.policy.empty()) ordered.policy.push_back(batch.policy[r]);
  }
  for (int r : batch.logits_rows) ordered.logits_rows.push_back(at[size_t(r)]);
  return count;
}

CpuForward::CpuForward(const Model& model, PagedKVCache& cache, std::optional<TensorRank> rank)
    : model_(model), cache_(cache), rank_(rank),
      own_heads_(rank ? rank->shard.q_heads : model.config.num_heads) {
  SKIM_REQUIRE(!rank || (rank->world && rank->kv_group && rank->kv_group->size() == rank->shard.kv_group_ranks),
               "internal: a tensor-parallel rank without its communicators");
}

void CpuForward::ensure_capacity(int rows) {
  if (rows <= capacity_) return;
  const ModelConfig& c = model_.config;
  size_t n = size_t(rows);
  x_.resize(n * c.hidden_size);
  y_.resize(n * c.hidden_size);
  h_.resize(n * c.hidden_size);
  const size_t own = size_t(own_heads_) * c.head_dim;
  q_.resize(n * own);
  q_pre_.resize(n * own);
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  attn_.resize(n * own);
  if (rank_ && rank_->shard.replicated()) {
    group_q_.resize(n * c.q_dim());
    group_q_pre_.resize(n * c.q_dim());
    group_attn_.resize(n * c.q_dim());
    gathered_.resize(n * c.q_dim());
  }
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
  if (!rank_) {
    for (int r = 0; r < n; ++r) model_.weights.embed.row(batch_->tokens[size_t(r)], x_.data() + size_t(r) * H);
    return;
  }
  // The rank holding a token's embedding row writes it, the others zeros; the sum is the row.
  const TensorShard& s = rank_->shard;
  for (int r = 0; r < n; ++r) {
    const int t = batch_->tokens[size_t(r)] - s.vocab_begin;
    float* x = x_.data() + size_t(r) * H;
    if (t >= 0 && t < s.vocab)
      model_.weights.embed.row(t, x);
    else
      std::fill_n(x, H, 0.0f);
  }
  rank_->world->all_reduce_sum(x_.data(), size_t(n) * H);
}

void CpuForward::add_rmsnorm(int n, int layer, NormWeight weight, bool residual) {
  const ModelConfig& c = model_.config;
  const int H = c.hidden_size;
  if (residual) cpu::add_inplace(x_.data(), y_.data(), int64_t(n) * H);
  // A second, later guess of layer + 1's queries: from x with this layer's attention added
  // (what a copy overlapping this layer's MLP alone could use).
  if (weight == NormWeight::mlp) speculate_next_layer(n, layer);
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
    cpu::rmsnorm(q_.data(), w.q_norm.data(), q_.data(), n * own_heads_, d, c.rms_norm_eps);
    cpu::rmsnorm(k_.data(), w.k_norm.data(), k_.data(), n * c.num_kv_heads, d, c.rms_norm_eps);
  }
  std::copy_n(q_.data(), size_t(n) * own_heads_ * d, q_pre_.data());
  const float* inv_freq = model_.rope_inv_freq.data();
  const int32_t* positions = batch_->positions.data();
  cpu::rope(q_.data(), positions, inv_freq, n, own_heads_, d);
  cpu::rope(k_.data(), positions, inv_freq, n, c.num_kv_heads, d);
  for (int r = 0; r < n; ++r)  // the cache keeps the pages' digests as it writes
    cache_.write(layer, *batch_->tables[size_t(r)], positions[r], k_.data() + size_t(r) * c.kv_dim(),
                 v_.data() + size_t(r) * c.kv_dim());
  if (rank_ && rank_->shard.replicated()) gather_group_queries(n);
}

// [ranks][n][own heads][d] from the group's ranks -> [n][group heads][d], the ranks' heads in
// rank order (each holds consecutive query heads of the group).
void CpuForward::gather_group_queries(int n) {
  const size_t own = size_t(own_heads_) * model_.config.head_dim, count = size_t(n) * own;
  const int ranks = rank_->shard.kv_group_ranks;
  auto gather = [&](const std::vector<float>& mine, std::vector<float>& group) {
    rank_->kv_group->all_gather(mine.data(), count, gathered_.data());
    cpu::unpack_vocab_slices(gathered_.data(), ranks, n, int(own), ranks * int(own), group.data());
  };
  gather(q_, group_q_);
  gather(q_pre_, group_q_pre_);
}

AttentionBatch CpuForward::attention_batch(int n, int layer) {
  const ModelConfig& c = model_.config;
  const ForwardBatch& b = *batch_;
  const bool group = rank_ && rank_->shard.replicated();  // attends the group, keeps its heads
  return AttentionBatch{.layer = layer,
                        .num_rows = n,
                        .num_heads = c.num_heads,
                        .num_kv_heads = c.num_kv_heads,
                        .head_dim = c.head_dim,
                        .scale = 1.0f / std::sqrt(float(c.head_dim)),
                        .decode = b.decode,
                        .kv = cache_.layer(layer),
                        .positions = b.positions.data(),
                        .tables = b.tables.data(),
                        .q = group ? group_q_.data() : q_.data(),
                        .q_pre = group ? group_q_pre_.data() : q_pre_.data(),
                        .out = group ? group_attn_.data() : attn_.data(),
                        .retro_step = b.retro_step.empty() ? nullptr : b.retro_step.data()};
}

void CpuForward::attention(int n, int layer) {
  const ModelConfig& c = model_.config;
  const bool group = rank_ && rank_->shard.replicated();
  speculate_next_layer(n, layer);  // before attend: x_ is still this layer's input
  policy_->attend(attention_batch(n, layer));
  if (!group) return;
  const size_t own = size_t(own_heads_) * c.head_dim, offset = size_t(rank_->shard.own_head_offset()) * c.head_dim;
  for (int r = 0; r < n; ++r)
    std::copy_n(group_attn_.data() + size_t(r) * c.q_dim() + offset, own, attn_.data() + size_t(r) * own);
}

void CpuForward::speculate_next_layer(int n, int layer) {
  const ModelConfig& c = model_.config;
  if (!batch_->decode || rank_ || layer + 1 >= c.num_layers || !policy_->wants_speculation()) return;
  const LayerWeights& next = model_.weights.layers[size_t(layer) + 1];
  const int d = c.head_dim;
  guess_h_.resize(size_t(n) * c.hidden_size);
  guess_q_.resize(size_t(n) * c.q_dim());
  cpu::rmsnorm(x_.data(), next.attn_norm.data(), guess_h_.data(), n, c.hidden_size, c.rms_norm_eps);
  cpu::linear(guess_h_.data(), next.wq, bias(next.bq), guess_q_.data(), n);
  if (c.qk_norm) cpu::rmsnorm(guess_q_.data(), next.q_norm.data(), guess_q_.data(), n * c.num_heads, d, c.rms_norm_eps);
  cpu::rope(guess_q_.data(), batch_->positions.data(), model_.rope_inv_freq.data(), n, c.num_heads, d);
  AttentionBatch guess = attention_batch(n, layer + 1);  // its newest key not yet written: a guess ahead of it
  guess.q = guess_q_.data();
  guess.q_pre = nullptr;
  guess.out = nullptr;
  policy_->speculate(guess);
}

void CpuForward::silu_mul(int n) {
  cpu::silu_mul(gate_.data(), up_.data(), gate_.data(), int64_t(n) * model_.config.intermediate_size);
}

void CpuForward::all_reduce(int n) {
  if (rank_) rank_->world->all_reduce_sum(y_.data(), size_t(n) * model_.config.hidden_size);
}

void CpuForward::logits(int n_logits) {
  const int H = model_.config.hidden_size;
  final_.resize(size_t(n_logits) * H);  // a row may be asked for more than once
  for (int i = 0; i < n_logits; ++i)
    std::copy_n(h_.data() + size_t(batch_->logits_rows[size_t(i)]) * H, H, final_.data() + size_t(i) * H);
  if (!rank_) {
    cpu::linear(final_.data(), model_.weights.output(), nullptr, logits_->data(), n_logits);
    return;
  }
  gather_logits(n_logits);
}

// Each rank's vocabulary slice [n_logits][vocab_stride] (its LM head is padded to the stride),
// gathered and laid side by side: [n_logits][vocab_size] on every rank.
void CpuForward::gather_logits(int n_logits) {
  const TensorShard& s = rank_->shard;
  const int V = model_.config.vocab_size, stride = s.vocab_stride, ranks = s.size;
  const size_t count = size_t(n_logits) * stride;
  slice_logits_.resize(count * (1 + size_t(ranks)));  // mine, then the gathered slices
  float* mine = slice_logits_.data();
  float* all = mine + count;
  cpu::linear(final_.data(), model_.weights.output(), nullptr, mine, n_logits);
  rank_->world->all_gather(mine, count, all);
  cpu::unpack_vocab_slices(all, ranks, n_logits, stride, V, logits_->data());
}

}  // namespace skim
