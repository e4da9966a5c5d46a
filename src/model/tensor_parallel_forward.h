// Tensor parallelism on the CPU (issue 19): `size` ranks, one thread each, each a CpuForward
// over its shard of the model (model/tensor_shard.h) and a KV cache of its KV heads, talking
// through in-process communicators (backend/cpu/thread_communicator.h). The engine sees one
// Forward; the scheduler and server above it do not change.
//
// Every rank runs the same page tables: the ranks' page pools make the same claims in the same
// order, so a sequence's pages have the same ids on every rank (checked on each claim). Rank 0
// attends with the engine's policy object (so its counters and observers report rank 0's heads);
// the other ranks with their own instances of the same policy string, made when it changes.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/communicator.h"
#include "model/forward.h"
#include "model/rank_threads.h"

namespace skim {

class TensorParallelForward final : public Forward {
 public:
  // `shape` is the whole model's cache shape (the ranks hold their KV heads of it); `threads`
  // the cores to share among the ranks.
  TensorParallelForward(const Model& model, const KVCacheShape& shape, int size, int threads);
  ~TensorParallelForward() override;

  void run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) override;
  std::optional<double> decode_kv_bytes_read() const override;

  void reserve(PageTable& table, int length) override;
  void release(PageTable& table) override;
  void shrink(PageTable& table, int length) override;
  void copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) override;
  void fork_state(const PageTable& from, const PageTable& to) override;
  void drop_state(const PageTable& table) override;
  void policy_replaced() override;

  int size() const { return int(ranks_.size()); }

 private:
  struct Rank {
    std::unique_ptr<Model> model;
    std::unique_ptr<PagedKVCache> cache;
    std::unique_ptr<Communicator> world, kv_group;
    std::unique_ptr<CpuForward> forward;
    std::unique_ptr<AttentionPolicy> policy;  // ranks > 0: the engine's policy string's
    std::vector<float> logits;
  };
  // Makes ranks > 0 run `policy`'s string (new instances when it changed).
  void follow_policy(AttentionPolicy& policy);
  // The same pool operation on every rank's cache; the page ids must agree.
  void on_every_cache(PageTable& table, const std::function<void(PagedKVCache&, PageTable&)>& op);

  int head_dim_ = 0;
  std::vector<Rank> ranks_;
  AttentionPolicy* followed_ = nullptr;  // the engine's policy, rank 0's; ranks > 0 copy it
  std::unique_ptr<RankThreads> threads_;
};

}  // namespace skim
