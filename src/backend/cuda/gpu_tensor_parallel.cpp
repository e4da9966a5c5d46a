#include "backend/cuda/gpu_tensor_parallel.h"

#include "backend/cuda/device_memory.h"
#include "backend/cuda/nccl_communicator.h"
#include "core/error.h"
#include "model/model.h"

namespace skim::cuda {

namespace {

// What a GPU rank's forward refers to.
struct GpuRankState {
  std::unique_ptr<Communicator> comm;
};

}  // namespace

std::unique_ptr<TensorParallelForward> make_gpu_tensor_parallel(
    const ModelConfig& c, int size, const std::function<GpuWeights(const TensorShard&)>& weights,
    const KVCacheShape& shape, const GpuForwardOptions& options) {
  std::vector<TensorShard> shards;
  for (int r = 0; r < size; ++r) shards.push_back(plan_tensor_shard(c, r, size));
  SKIM_REQUIRE(!shards[0].replicated(),
               "--tp {} with --device cuda: the model's {} KV heads must divide by the GPUs (more GPUs than KV "
               "heads replicate them, which runs on the CPU only so far)", size, c.num_kv_heads);
  std::vector<std::unique_ptr<Communicator>> comms = make_nccl_communicators(size);
  auto pool = std::make_unique<RankThreads>(size, [](int r) { check(cudaSetDevice(r), "cudaSetDevice"); });
  std::vector<TensorParallelForward::Rank> ranks(static_cast<size_t>(size));
  pool->run([&](int r) {
    const TensorShard& s = shards[size_t(r)];
    auto st = std::make_shared<GpuRankState>();
    st->comm = std::move(comms[size_t(r)]);
    KVCacheShape rank_shape = shape;
    rank_shape.num_kv_heads = s.kv_heads;
    GpuForwardOptions o = options;
    o.shard = s;
    o.comm = st->comm.get();
    auto w = std::make_shared<const GpuWeights>(weights(s));
    ranks[size_t(r)].forward = std::make_unique<GpuForward>(std::move(w), rank_shape, o);
    ranks[size_t(r)].comms = {st->comm.get()};
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
