// Tensor parallelism over the GPUs of this machine (issue 19): rank r on device r, a GpuForward
// over its shard (model/tensor_shard.h) with an NCCL communicator on its stream: two
// all-reduces per layer and the embedding's, one all-gather of the logits, all inside each
// rank's CUDA graphs. Every rank samples the same tokens from the same gathered logits.
#pragma once

#include <functional>
#include <memory>

#include "backend/cuda/gpu_forward.h"
#include "model/tensor_parallel_forward.h"

namespace skim::cuda {

// `size` GPUs, rank r's weights made by weights(shard) on its device; `shape` and `options` are
// the whole model's (each rank keeps its KV heads of the cache).
std::unique_ptr<TensorParallelForward> make_gpu_tensor_parallel(
    const ModelConfig& config, int size, const std::function<GpuWeights(const TensorShard&)>& weights,
    const KVCacheShape& shape, const GpuForwardOptions& options);

// The same from a loaded model: each rank uploads shard_model's slices.
std::unique_ptr<TensorParallelForward> make_gpu_tensor_parallel(const Model& model, int size, const KVCacheShape& shape,
                                                                const GpuForwardOptions& options);

}  // namespace skim::cuda
