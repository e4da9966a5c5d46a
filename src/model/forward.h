// A backend's forward pass over a paged KV cache: a batch of rows (a prefill chunk, decode
// tokens of several sequences, or both) goes through every layer at once. CpuForward is the
// CPU backend (fp32, the reference); both it and cuda::GpuForward run model/llama_forward.h's
// one sequence of ops.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attention/policy.h"
#include "backend/backend.h"
#include "backend/sample_params.h"
#include "kv/paged_kv_cache.h"
#include "backend/communicator.h"
#include "model/model.h"
#include "model/tensor_shard.h"
#include "skim/sampling.h"  // TokenLogprob

namespace skim {

struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<PageTable*> tables;  // per row: its sequence's pages (reserved by the caller)
  std::vector<int> logits_rows;    // rows whose next-token logits are wanted
  bool decode = false;             // every row is a decode step of its sequence
  std::vector<int32_t> retro_step; // RetroAttention: per row, the decode step that first fed it
  std::vector<int32_t> policy;     // per row: its policy's index (Forward::acquire_policy); empty: 0
};

// The rows that `first` marks, then the others, each group in its order (rows_first's order).
std::vector<int> marked_first(const std::vector<bool>& first);

// `batch` with the rows that `first` marks ([rows]) moved to the front, each group in its
// order, into `ordered`, its logits rows following their rows (so the logits come out in the
// order asked); `moved` says whether any row moved (else `ordered` is left alone). Returns how
// many rows `first` marks. The GPU puts a decode step's cs rows first.
int rows_first(const ForwardBatch& batch, const std::vector<bool>& first, ForwardBatch& ordered, bool& moved);

// A backend's forward pass and the KV cache it keeps (CpuForward here, in host memory;
// cuda::GpuForward on the GPU, in device memory). The engine sees only this.
class Forward {
 public:
  virtual ~Forward() = default;
  // Runs the rows through the model, writes their K/V, and fills logits
  // [logits_rows.size()][vocab]. Positions must be reserved in the rows' page tables.
  virtual void run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) = 0;

  // Whether run_sampled samples where the logits are (the GPU: only tokens come back).
  virtual bool samples_on_device() const { return false; }
  // K/V and metadata bytes the decode rows have read so far when the forward counts them
  // itself (the GPU, from its planner); none: the policy's stats count them (the CPU).
  virtual std::optional<double> decode_kv_bytes_read() const { return std::nullopt; }
  // The backend's own counters by name, since it began (the GPU over KV beyond its memory: the
  // device cache's pages copied, hits and pages copied ahead); none by default.
  virtual std::map<std::string, double> counters() const { return {}; }
  // Per-sequence policies, for a backend whose decode batches mix them (the GPU: each row's
  // plan is its policy's; the CPU runs the one policy passed to run()). acquire_policy
  // registers a policy string and returns the index ForwardBatch::policy names (0: the policy
  // the forward was made with); each acquire is released once.
  virtual bool mixes_policies() const { return false; }
  virtual int acquire_policy(const std::string& policy);
  virtual void release_policy(int index);
  // run(), then each logits row's next token drawn with params[i] (one per logits row). Only
  // for a backend that samples_on_device(); the others leave sampling to the caller. With
  // `logprobs`, top_logprobs[i] >= 0 asks row i's token's log-probability and that many most
  // likely alternatives (computed where the logits are): (*logprobs)[i], of every row.
  virtual std::vector<int32_t> run_sampled(const ForwardBatch& batch, AttentionPolicy& policy,
                                           std::span<const SampleParams> params,
                                           std::span<const int32_t> top_logprobs = {},
                                           std::vector<TokenLogprob>* logprobs = nullptr);

  // The KV cache's pages (PagedKVCache's contract): grow a table to hold `length` tokens,
  // return its pages, keep its first `length` tokens (a multiple of the page size), and copy
  // pages' K, V and digests in every layer, from[i] to to[i] (forking a sequence).
  virtual void reserve(PageTable& table, int length) = 0;
  virtual void release(PageTable& table) = 0;
  virtual void shrink(PageTable& table, int length) = 0;
  virtual void copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) = 0;
  // Per-sequence policy state the forward keeps itself (the GPU's MAC rings; the CPU's lives in
  // its AttentionPolicy): `to` became a copy of `from` (after copy_pages), or `table`'s state
  // is no longer valid (its sequence closed or was cut).
  virtual void fork_state(const PageTable& /*from*/, const PageTable& /*to*/) {}
  virtual void drop_state(const PageTable& /*table*/) {}
  // The engine replaced its policy object (Engine::set_policy): a forward that keeps copies of
  // it (the tensor-parallel one, for ranks > 0) makes new ones at the next run.
  virtual void policy_replaced() {}
  // A prompt of several chunks layer by layer (every chunk through layer l before layer l + 1),
  // where that is how this forward prefills a sequence under policy `policy_index`: the GPU over
  // KV beyond its memory, whose chunk by chunk attention would read the prefix over PCIe once
  // per chunk. run_by_layer takes one sequence's chunks in order (as run() would, one after
  // another) and fills logits[c] with chunk c's logits rows.
  virtual bool runs_prompts_by_layer(int /*policy_index*/) const { return false; }
  virtual void run_by_layer(std::span<const ForwardBatch> chunks, std::vector<std::vector<float>>& logits);
};

// One rank of a tensor-parallel CPU forward (model/tensor_parallel_forward.h): its shard and
// the communicators it sums and gathers over.
struct TensorRank {
  TensorShard shard;
  Communicator* world = nullptr;     // every rank
  Communicator* kv_group = nullptr;  // the ranks holding the same KV head (shard.kv_group_ranks)
};

class CpuForward final : public Forward, private Backend {
 public:
  // The whole model on one thread team, or, with `rank`, one rank's shard (`model` is then
  // shard_model's, the cache holds the rank's KV heads).
  CpuForward(const Model& model, PagedKVCache& cache, std::optional<TensorRank> rank = std::nullopt);

  void run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) override;
  void reserve(PageTable& table, int length) override { cache_.reserve(table, length); }
  void release(PageTable& table) override { cache_.release(table); }
  void shrink(PageTable& table, int length) override { cache_.shrink(table, length); }
  void copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) override {
    for (size_t i = 0; i < from.size(); ++i) cache_.copy_page(from[i], to[i]);
  }

 private:
  // Backend: the ops of model/llama_forward.h on the batch run() staged.
  void embed(int n) override;
  void add_rmsnorm(int n, int layer, NormWeight weight, bool residual) override;
  void linear(int n, int layer, Projection p) override;
  void qkv_rope_append(int n, int layer) override;
  void attention(int n, int layer) override;
  void silu_mul(int n) override;
  void all_reduce(int n) override;
  void logits(int n_logits) override;

  void ensure_capacity(int rows);
  // The attention batch of layer's step over the rows' queries and outputs.
  AttentionBatch attention_batch(int n, int layer);
  // The policy's choice for layer + 1 over a guess of its queries (AttentionPolicy::speculate):
  // x (the residual: layer's input at its attention, with its attention added at its MLP norm)
  // through layer + 1's input norm, query projection and RoPE (InfiniGen's speculation). Only
  // in decode steps while the policy wants guesses (evaluation; not with tensor parallelism),
  // twice a layer: at its attention, then at its MLP norm.
  void speculate_next_layer(int n, int layer);
  // Tensor parallelism: the group's queries from the ranks sharing this rank's KV head.
  void gather_group_queries(int n);
  void gather_logits(int n_logits);

  const Model& model_;
  PagedKVCache& cache_;
  // The pass in flight (set by run()).
  const ForwardBatch* batch_ = nullptr;
  AttentionPolicy* policy_ = nullptr;
  std::vector<float>* logits_ = nullptr;
  std::optional<TensorRank> rank_;
  int own_heads_ = 0;  // query heads projected here (all of them without tensor parallelism)
  // Activations (backend/backend.h names them), grown to the largest batch seen.
  int capacity_ = 0;
  std::vector<float> x_, y_, h_, q_, q_pre_, k_, v_, attn_, gate_, up_, final_;
  // A replicated KV head's rank: q, q_pre and attention of its whole group, a gather's scratch,
  // and its vocabulary slice's logits.
  std::vector<float> group_q_, group_q_pre_, group_attn_, gathered_, slice_logits_;
  std::vector<float> guess_h_, guess_q_;  // speculate_next_layer's normed input and queries
};

}  // namespace skim
