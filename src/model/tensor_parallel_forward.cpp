#include "model/tensor_parallel_forward.h"

#include <omp.h>

#include <algorithm>

#include "backend/cpu/thread_communicator.h"
#include "core/error.h"

namespace skim {

TensorParallelForward::TensorParallelForward(std::vector<Rank> ranks, std::unique_ptr<RankThreads> threads,
                                             int vocab_size, int head_dim)
    : ranks_(std::move(ranks)), threads_(std::move(threads)), vocab_size_(vocab_size), head_dim_(head_dim),
      copies_(ranks_.size()), rank_logits_(ranks_.size()) {}

void TensorParallelForward::on_ranks(const std::function<void(int)>& fn) const {
  SKIM_REQUIRE(!failed_, "tensor parallelism: a rank failed earlier and the ranks no longer agree (restart skim)");
  threads_->run([&](int r) {
    try {
      fn(r);
    } catch (...) {
      if (!failed_.exchange(true))
        for (const Rank& k : ranks_)
          for (Communicator* c : k.comms) c->abort();
      throw;
    }
  });
}

TensorParallelForward::~TensorParallelForward() {
  // Each rank's resources go on its own thread (a GPU's on its device).
  threads_->run([&](int r) {
    ranks_[size_t(r)].forward.reset();
    ranks_[size_t(r)].state.reset();
  });
}

void TensorParallelForward::check_batch(const ForwardBatch& batch) const {
  const int n = int(batch.tokens.size());
  SKIM_REQUIRE(n > 0 && batch.positions.size() == size_t(n) && batch.tables.size() == size_t(n),
               "forward: malformed batch");
  for (int t : batch.tokens)
    SKIM_REQUIRE(t >= 0 && t < vocab_size_, "token id {} out of range [0, {})", t, vocab_size_);
  for (int r : batch.logits_rows)
    SKIM_REQUIRE(r >= 0 && r < n, "forward: logits row {} outside the batch of {}", r, n);
}

void TensorParallelForward::policy_replaced() { followed_ = nullptr; }

void TensorParallelForward::follow_policy(AttentionPolicy& policy) {
  if (followed_ == &policy) return;
  for (size_t r = 1; r < ranks_.size(); ++r) copies_[r] = make_policy(policy.spec());
  followed_ = &policy;
}

void TensorParallelForward::run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) {
  check_batch(batch);
  follow_policy(policy);
  on_ranks([&](int r) {
    ranks_[size_t(r)].forward->run(batch, r == 0 ? policy : *copies_[size_t(r)], r == 0 ? logits : rank_logits_[size_t(r)]);
  });
}

std::vector<int32_t> TensorParallelForward::run_sampled(const ForwardBatch& batch, AttentionPolicy& policy,
                                                        std::span<const SampleParams> params,
                                                        std::span<const int32_t> top_logprobs,
                                                        std::vector<TokenLogprob>* logprobs) {
  check_batch(batch);
  follow_policy(policy);
  // Every rank holds the whole logits after the gather and draws with the same parameters:
  // the same tokens everywhere; rank 0's come back.
  std::vector<int32_t> tokens;
  on_ranks([&](int r) {
    AttentionPolicy& p = r == 0 ? policy : *copies_[size_t(r)];
    std::vector<TokenLogprob> unused;
    std::vector<int32_t> t = ranks_[size_t(r)].forward->run_sampled(batch, p, params, top_logprobs,
                                                                    r == 0 ? logprobs : (logprobs ? &unused : nullptr));
    if (r == 0) tokens = std::move(t);
  });
  return tokens;
}

std::optional<double> TensorParallelForward::decode_kv_bytes_read() const {
  // What every rank read (a replicated KV head is read by each of its ranks): a backend that
  // counts its own (the GPU), else the policies' counts (rank 0's is the engine's policy).
  std::vector<std::optional<double>> counted(ranks_.size());
  on_ranks([&](int r) { counted[size_t(r)] = ranks_[size_t(r)].forward->decode_kv_bytes_read(); });
  double bytes = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (counted[r]) {
      bytes += *counted[r];
      continue;
    }
    const AttentionPolicy* p = r == 0 ? followed_ : copies_[r].get();
    if (!p) continue;
    const AttentionStats& s = p->stats();
    bytes += double(s.decode_keys_read) * head_dim_ * 2 * sizeof(float) + double(s.decode_metadata_bytes);
  }
  return bytes;
}

// Registering a policy runs no collective, and a request may ask for one a forward refuses (a
// ninth live policy, parameters out of a kernel's range): the ranks that took it give it back,
// the error goes to the request, and the forward stays usable.
int TensorParallelForward::acquire_policy(const std::string& policy) {
  SKIM_REQUIRE(!failed_, "tensor parallelism: a rank failed earlier and the ranks no longer agree (restart skim)");
  std::vector<int> index(ranks_.size(), -1);
  std::vector<std::exception_ptr> errors(ranks_.size());
  threads_->run([&](int r) {
    try {
      index[size_t(r)] = ranks_[size_t(r)].forward->acquire_policy(policy);
    } catch (...) {
      errors[size_t(r)] = std::current_exception();
    }
  });
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    threads_->run([&](int r) {
      if (index[size_t(r)] >= 0) ranks_[size_t(r)].forward->release_policy(index[size_t(r)]);
    });
    std::rethrow_exception(e);
  }
  for (size_t r = 1; r < ranks_.size(); ++r)
    SKIM_REQUIRE(index[r] == index[0], "internal: rank {} registered policy {} as {}, rank 0 as {}", r, policy,
                 index[r], index[0]);
  return index[0];
}

void TensorParallelForward::release_policy(int index) {
  on_ranks([&](int r) { ranks_[size_t(r)].forward->release_policy(index); });
}

void TensorParallelForward::on_every_pool(PageTable& table, const std::function<void(Forward&, PageTable&)>& op) {
  const PageTable before = table;
  op(*ranks_[0].forward, table);  // may throw (a full pool): then no rank has changed
  for (size_t r = 1; r < ranks_.size(); ++r) {
    PageTable copy = before;
    op(*ranks_[r].forward, copy);
    SKIM_REQUIRE(copy.pages == table.pages && copy.length == table.length,
                 "internal: rank {}'s KV pages diverged from rank 0's", r);
  }
}

void TensorParallelForward::reserve(PageTable& table, int length) {
  on_every_pool(table, [&](Forward& f, PageTable& t) { f.reserve(t, length); });
}
void TensorParallelForward::release(PageTable& table) {
  // A backend may drop per-sequence state keyed by the table's address here (the GPU's): each
  // rank sees the engine's table, its pool a copy.
  on_ranks([&](int r) {
    if (r > 0) ranks_[size_t(r)].forward->drop_state(table);
  });
  on_every_pool(table, [](Forward& f, PageTable& t) { f.release(t); });
}
void TensorParallelForward::shrink(PageTable& table, int length) {
  on_every_pool(table, [&](Forward& f, PageTable& t) { f.shrink(t, length); });
}
void TensorParallelForward::copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) {
  on_ranks([&](int r) { ranks_[size_t(r)].forward->copy_pages(from, to); });
}

// Rank 0's policy is the engine's, which forks and forgets its own state.
void TensorParallelForward::fork_state(const PageTable& from, const PageTable& to) {
  on_ranks([&](int r) {
    ranks_[size_t(r)].forward->fork_state(from, to);
    if (r > 0 && copies_[size_t(r)]) copies_[size_t(r)]->fork(&from, &to);
  });
}
void TensorParallelForward::drop_state(const PageTable& table) {
  on_ranks([&](int r) {
    ranks_[size_t(r)].forward->drop_state(table);
    if (r > 0 && copies_[size_t(r)]) copies_[size_t(r)]->forget(&table);
  });
}

namespace {

// What a CPU rank's forward refers to.
struct CpuRankState {
  std::unique_ptr<Model> model;
  std::unique_ptr<PagedKVCache> cache;
  std::unique_ptr<Communicator> world, kv_group;
};

}  // namespace

std::unique_ptr<TensorParallelForward> make_cpu_tensor_parallel(const Model& model, const KVCacheShape& shape,
                                                                int size, int threads) {
  const ModelConfig& c = model.config;
  std::vector<TensorShard> shards;
  for (int r = 0; r < size; ++r) shards.push_back(plan_tensor_shard(c, r, size));
  std::vector<std::unique_ptr<Communicator>> world = make_thread_communicators(size);
  // The ranks that replicate one KV head talk among themselves too (rank order = head order).
  const int replicas = shards[0].kv_group_ranks;
  std::vector<std::unique_ptr<Communicator>> kv_groups;
  for (int g = 0; g < size / replicas; ++g)
    for (auto& comm : make_thread_communicators(replicas)) kv_groups.push_back(std::move(comm));
  const int per_rank = std::max(1, threads / size);
  auto pool = std::make_unique<RankThreads>(size, [per_rank](int) { omp_set_num_threads(per_rank); });
  std::vector<TensorParallelForward::Rank> ranks(static_cast<size_t>(size));
  pool->run([&](int r) {
    auto st = std::make_shared<CpuRankState>();
    const TensorShard& s = shards[size_t(r)];
    st->model = shard_model(model, s);
    KVCacheShape rank_shape = shape;
    rank_shape.num_kv_heads = s.kv_heads;
    st->cache = std::make_unique<PagedKVCache>(rank_shape);
    st->world = std::move(world[size_t(r)]);
    st->kv_group = std::move(kv_groups[size_t(r)]);
    ranks[size_t(r)].forward =
        std::make_unique<CpuForward>(*st->model, *st->cache, TensorRank{s, st->world.get(), st->kv_group.get()});
    ranks[size_t(r)].comms = {st->world.get(), st->kv_group.get()};
    ranks[size_t(r)].state = std::move(st);
  });
  return std::make_unique<TensorParallelForward>(std::move(ranks), std::move(pool), c.vocab_size, c.head_dim);
}

}  // namespace skim
