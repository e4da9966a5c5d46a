#include "backend/cuda/gpu_tensor_parallel.h"

#include "backend/cuda/device_memory.h"
#include "backend/cuda/nccl_communicator.h"
#include "core/error.h"
#include "model/model.h"

namespace skim::cuda {

namespace {

// What a GPU rank's forward refers to.
struct GpuRankState {
  std::unique_ptr<Communicator> comm, kv_group;
};

}  // namespace

std::unique_ptr<TensorParallelForward> make_gpu_tensor_parallel(
    const ModelConfig& c, int size, const std::function<GpuWeights(const TensorShard&)>& weights,
    const KVCacheShape& shape, const GpuForwardOptions& options) {
  std::vector<TensorShard> shards;
  for (int r = 0; r < size; ++r) shards.push_back(plan_tensor_shard(c, r, size));
  std::vector<int> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all[size_t(r)] = r;
  std::vector<std::unique_ptr<Communicator>> comms = make_nccl_communicators(all);
  // The GPUs replicating one KV head gather its group's queries among themselves.
  const int replicas = shards[0].kv_group_ranks;
  std::vector<std::unique_ptr<Communicator>> kv_groups(static_cast<size_t>(size));
  if (replicas > 1)
    for (int first = 0; first < size; first += replicas) {
      std::vector<int> devices;
      for (int r = first; r < first + replicas; ++r) devices.push_back(r);
      auto group = make_nccl_communicators(devices);
      for (int i = 0; i < replicas; ++i) kv_groups[size_t(first + i)] = std::move(group[size_t(i)]);
    }
  auto pool = std::make_unique<RankThreads>(size, [](int r) { check(cudaSetDevice(r), "cudaSetDevice"); });
  std::vector<TensorParallelForward::Rank> ranks(static_cast<size_t>(size));
  pool->run([&](int r) {
    const TensorShard& s = shards[size_t(r)];
    auto st = std::make_shared<GpuRankState>();
    st->comm = std::move(comms[size_t(r)]);
    st->kv_group = std::move(kv_groups[size_t(r)]);
    KVCacheShape rank_shape = shape;
    rank_shape.num_kv_heads = s.kv_heads;
    GpuForwardOptions o = options;
    o.shard = s;
    o.comm = st->comm.get();
    o.kv_group = st->kv_group.get();
    auto w = std::make_shared<const GpuWeights>(weights(s));
    ranks[size_t(r)].forward = std::make_unique<GpuForward>(std::move(w), rank_shape, o);
    ranks[size_t(r)].comms = {st->comm.get()};
    if (st->kv_group) ranks[size_t(r)].comms.push_back(st->kv_group.get());
    ranks[size_t(r)].state = std::move(st);
  });
  // Every rank at once: NCCL connects before the first collective a graph captures.
  pool->run([&](int r) { dynamic_cast<GpuForward&>(*ranks[size_t(r)].forward).warm_collectives(); });
  return std::make_unique<TensorParallelForward>(std::move(ranks), std::move(pool), c.vocab_size, c.head_dim);
}

std::unique_ptr<TensorParallelForward> make_gpu_tensor_parallel(const Model& model, int size, const KVCacheShape& shape,
                                                                const GpuForwardOptions& options) {
  return make_gpu_tensor_parallel(
      model.config, size, [&](const TensorShard& s) { return upload_weights(*shard_model(model, s)); }, shape,
      options);
}

}  // namespace skim::cuda
