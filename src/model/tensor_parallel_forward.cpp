#include "model/tensor_parallel_forward.h"

#include <algorithm>

#include "backend/cpu/thread_communicator.h"
#include "core/error.h"

namespace skim {

TensorParallelForward::TensorParallelForward(const Model& model, const KVCacheShape& shape, int size, int threads)
    : head_dim_(model.config.head_dim) {
  const ModelConfig& c = model.config;
  std::vector<TensorShard> shards;
  for (int r = 0; r < size; ++r) shards.push_back(plan_tensor_shard(c, r, size));
  std::vector<std::unique_ptr<Communicator>> world = make_thread_communicators(size);
  // The ranks that replicate one KV head talk among themselves too (rank order = head order).
  const int replicas = shards[0].kv_group_ranks;
  std::vector<std::unique_ptr<Communicator>> kv_groups;
  for (int g = 0; g < size / replicas; ++g)
    for (auto& comm : make_thread_communicators(replicas)) kv_groups.push_back(std::move(comm));
  ranks_.resize(size_t(size));
  for (int r = 0; r < size; ++r) {
    Rank& k = ranks_[size_t(r)];
    k.model = shard_model(model, shards[size_t(r)]);
    KVCacheShape s = shape;
    s.num_kv_heads = shards[size_t(r)].kv_heads;
    k.cache = std::make_unique<PagedKVCache>(s);
    k.world = std::move(world[size_t(r)]);
    k.kv_group = std::move(kv_groups[size_t(r)]);
    k.forward = std::make_unique<CpuForward>(*k.model, *k.cache,
                                             TensorRank{shards[size_t(r)], k.world.get(), k.kv_group.get()});
  }
  threads_ = std::make_unique<RankThreads>(size, std::max(1, threads / size));
}

TensorParallelForward::~TensorParallelForward() = default;

void TensorParallelForward::policy_replaced() { followed_ = nullptr; }

void TensorParallelForward::follow_policy(AttentionPolicy& policy) {
  if (followed_ == &policy) return;
  for (size_t r = 1; r < ranks_.size(); ++r) ranks_[r].policy = make_policy(policy.spec());
  followed_ = &policy;
}

void TensorParallelForward::run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) {
  // What could fail on one rank alone is checked here, before any rank waits on another.
  const int n = int(batch.tokens.size()), vocab = ranks_[0].model->config.vocab_size;
  SKIM_REQUIRE(n > 0 && batch.positions.size() == size_t(n) && batch.tables.size() == size_t(n),
               "forward: malformed batch");
  for (int t : batch.tokens) SKIM_REQUIRE(t >= 0 && t < vocab, "token id {} out of range [0, {})", t, vocab);
  for (int r : batch.logits_rows)
    SKIM_REQUIRE(r >= 0 && r < n, "forward: logits row {} outside the batch of {}", r, n);
  follow_policy(policy);
  threads_->run([&](int r) {
    Rank& k = ranks_[size_t(r)];
    k.forward->run(batch, r == 0 ? policy : *k.policy, r == 0 ? logits : k.logits);
  });
}

std::optional<double> TensorParallelForward::decode_kv_bytes_read() const {
  // What every rank read (a replicated KV head is read by each of its ranks): rank 0's count is
  // the engine policy's, the others' their own instances'.
  if (!followed_) return 0.0;
  double bytes = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const AttentionStats& s = r == 0 ? followed_->stats() : ranks_[r].policy->stats();
    bytes += double(s.decode_keys_read) * head_dim_ * 2 * sizeof(float) + double(s.decode_metadata_bytes);
  }
  return bytes;
}

void TensorParallelForward::on_every_cache(PageTable& table,
                                           const std::function<void(PagedKVCache&, PageTable&)>& op) {
  const PageTable before = table;
  op(*ranks_[0].cache, table);  // may throw (a full pool): then no rank has changed
  for (size_t r = 1; r < ranks_.size(); ++r) {
    PageTable copy = before;
    op(*ranks_[r].cache, copy);
    SKIM_REQUIRE(copy.pages == table.pages && copy.length == table.length,
                 "internal: rank {}'s KV pages diverged from rank 0's", r);
  }
}

void TensorParallelForward::reserve(PageTable& table, int length) {
  on_every_cache(table, [&](PagedKVCache& c, PageTable& t) { c.reserve(t, length); });
}
void TensorParallelForward::release(PageTable& table) {
  on_every_cache(table, [](PagedKVCache& c, PageTable& t) { c.release(t); });
}
void TensorParallelForward::shrink(PageTable& table, int length) {
  on_every_cache(table, [&](PagedKVCache& c, PageTable& t) { c.shrink(t, length); });
}
void TensorParallelForward::copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) {
  for (Rank& k : ranks_) k.forward->copy_pages(from, to);
}

// Rank 0's policy is the engine's, which forks and forgets its own state.
void TensorParallelForward::fork_state(const PageTable& from, const PageTable& to) {
  for (size_t r = 1; r < ranks_.size(); ++r)
    if (ranks_[r].policy) ranks_[r].policy->fork(&from, &to);
}
void TensorParallelForward::drop_state(const PageTable& table) {
  for (size_t r = 1; r < ranks_.size(); ++r)
    if (ranks_[r].policy) ranks_[r].policy->forget(&table);
}

}  // namespace skim
