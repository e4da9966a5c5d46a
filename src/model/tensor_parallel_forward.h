// Tensor parallelism (issue 19): `size` ranks, one thread each (RankThreads), each a backend's
// Forward over its shard of the model (model/tensor_shard.h) and a KV cache of its KV heads,
// talking through communicators (backend/communicator.h): in-process on the CPU
// (make_cpu_tensor_parallel), NCCL on GPUs (cuda::make_gpu_tensor_parallel). The engine sees
// one Forward; the scheduler and server above it do not change.
//
// Every rank runs the same page tables: the ranks' page pools make the same claims in the same
// order, so a sequence's pages have the same ids on every rank (checked on each claim). Rank 0
// attends with the engine's policy object (so its counters and observers report rank 0's heads);
// the other ranks with their own instances of the same policy string, made when it changes. A
// backend that mixes policies (the GPU) registers each policy string on every rank.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "model/forward.h"
#include "model/rank_threads.h"

namespace skim {

class TensorParallelForward final : public Forward {
 public:
  struct Rank {
    std::shared_ptr<void> state;  // what `forward` refers to (shard, cache, communicators)
    std::unique_ptr<Forward> forward;
    std::vector<Communicator*> comms;  // its communicators (in `state`), aborted if a rank fails
  };
  // `threads` runs each rank's calls on its own thread (ranks[r] was built on thread r).
  TensorParallelForward(std::vector<Rank> ranks, std::unique_ptr<RankThreads> threads, int vocab_size,
                        int head_dim);
  ~TensorParallelForward() override;

  void run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) override;
  bool samples_on_device() const override { return ranks_[0].forward->samples_on_device(); }
  std::vector<int32_t> run_sampled(const ForwardBatch& batch, AttentionPolicy& policy,
                                   std::span<const SampleParams> params, std::span<const int32_t> top_logprobs = {},
                                   std::vector<TokenLogprob>* logprobs = nullptr) override;
  std::optional<double> decode_kv_bytes_read() const override;
  bool mixes_policies() const override { return ranks_[0].forward->mixes_policies(); }
  int acquire_policy(const std::string& policy) override;
  void release_policy(int index) override;

  void reserve(PageTable& table, int length) override;
  void release(PageTable& table) override;
  void shrink(PageTable& table, int length) override;
  void copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) override;
  void fork_state(const PageTable& from, const PageTable& to) override;
  void drop_state(const PageTable& table) override;
  void policy_replaced() override;

  int size() const { return int(ranks_.size()); }
  Forward& rank(int r) { return *ranks_[size_t(r)].forward; }
  // Runs fn(r) on every rank's thread at once (benchmarks drive the ranks' own calls). When a
  // rank throws, every communicator is aborted (the others would wait for it in a collective)
  // and the forward refuses every later call.
  void on_ranks(const std::function<void(int)>& fn) const;

 private:
  // Checks what could fail on one rank alone, before any rank waits on another.
  void check_batch(const ForwardBatch& batch) const;
  // Makes ranks > 0 run `policy`'s string (new instances when it changed).
  void follow_policy(AttentionPolicy& policy);
  // The same pool operation on every rank (the caller's thread: pools live on the host); the
  // page ids must agree.
  void on_every_pool(PageTable& table, const std::function<void(Forward&, PageTable&)>& op);

  std::vector<Rank> ranks_;
  std::unique_ptr<RankThreads> threads_;
  int vocab_size_ = 0, head_dim_ = 0;
  AttentionPolicy* followed_ = nullptr;  // the engine's policy, rank 0's; ranks > 0 copy it
  mutable std::atomic<bool> failed_{false};  // a rank threw: the communicators are aborted
  std::vector<std::unique_ptr<AttentionPolicy>> copies_;  // [size], ranks > 0
  std::vector<std::vector<float>> rank_logits_;           // [size], ranks > 0
};

// The CPU's: `model` split over `size` ranks, each a CpuForward with `threads / size` OpenMP
// threads and in-process communicators; `shape` is the whole model's cache shape.
std::unique_ptr<TensorParallelForward> make_cpu_tensor_parallel(const Model& model, const KVCacheShape& shape,
                                                                int size, int threads);

}  // namespace skim
