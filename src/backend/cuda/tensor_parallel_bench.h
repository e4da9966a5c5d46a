// skim bench --tp: greedy decode steps of a random-weight model shape split over `tp` GPUs
// (gpu_tensor_parallel.h), each rank's weights generated on its device, each rank's KV random
// (no prefill: only the step is timed), against the per-GPU floor: the weights and KV one GPU
// reads over the copy bandwidth plus the step's all-reduces (timed alone, in a graph).
#pragma once

#include <string>

#include "model/config.h"

namespace skim::cuda {

struct TensorParallelPoint {
  int tp = 1, batch = 0, context = 0, steps = 0;
  double ms_per_step = 0;         // the slowest rank's GPU time per step
  double weight_bytes = 0;        // one GPU's per step (every weight of its shard but the embedding)
  double kv_bytes = 0;            // one GPU's K/V (and digests) per step, under the policy
  double all_reduce_us = 0;       // one all-reduce of the step's rows (batch x hidden fp32), in a graph
  int all_reduces = 0;            // per step: two per layer and the embedding's
  double floor_ms = 0;            // (weight + KV bytes) / bandwidth + all_reduces x all_reduce_us
};

TensorParallelPoint bench_tensor_parallel(const ModelConfig& config, int tp, int batch, int context, int steps,
                                          const std::string& policy, double copy_bw);

}  // namespace skim::cuda
