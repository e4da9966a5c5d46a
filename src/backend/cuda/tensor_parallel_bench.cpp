#include "backend/cuda/tensor_parallel_bench.h"

#include <algorithm>

#include "backend/communicator.h"
#include "backend/cuda/decode_bench.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gpu_tensor_parallel.h"
#include "backend/cuda/ops.cuh"

namespace skim::cuda {

namespace {

// One all-reduce of `count` floats on this rank's communicator: `reps` of them captured in a
// graph, replayed after a warm-up; GPU microseconds per all-reduce.
double time_all_reduce(GpuForward& f, size_t count, int reps) {
  Communicator* comm = f.communicator();
  if (!comm || comm->size() == 1) return 0;
  DeviceBuffer<float> buf(count);
  fill_f32(buf.data(), count, 1.0f, f.stream());
  cudaGraph_t g = nullptr;
  check(cudaStreamBeginCapture(f.stream(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < reps; ++i) comm->all_reduce_sum(buf.data(), count);
  check(cudaStreamEndCapture(f.stream(), &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaGraphLaunch(exec, f.stream()), "cudaGraphLaunch");  // warm-up
  check(cudaEventRecord(start, f.stream()), "cudaEventRecord");
  check(cudaGraphLaunch(exec, f.stream()), "cudaGraphLaunch");
  check(cudaEventRecord(stop, f.stream()), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  return double(ms) * 1e3 / reps;
}

}  // namespace

TensorParallelPoint bench_tensor_parallel(const ModelConfig& c, int tp, int batch, int context, int steps,
                                          const std::string& policy, double copy_bw) {
  const int warm = 4;
  const KVCacheShape shape = bench_cache_shape(c, batch, context + warm + steps);
  const int pages_per_seq = shape.num_pages / batch;
  GpuForwardOptions o;
  o.max_rows = batch;
  o.max_pages_per_seq = pages_per_seq;
  o.policy = policy;
  auto tpf = make_gpu_tensor_parallel(
      c, tp, [&](const TensorShard& s) { return random_weights(shard_config(c, s), 1 + 1000 * uint64_t(s.rank), s.vocab_stride); },
      shape, o);
  std::vector<int32_t> policies(size_t(batch), 0);
  // Each rank its own copies of the tables (decode_greedy grows them): the same pages on every
  // rank, as the pools make the same claims.
  std::vector<std::vector<PageTable>> tables(static_cast<size_t>(tp), std::vector<PageTable>(static_cast<size_t>(batch)));
  const size_t ranks = static_cast<size_t>(tp);
  std::vector<double> seconds(ranks), kv(ranks), weights(ranks), reduce_us(ranks);
  const int mean_len = context + warm + (steps + 1) / 2;
  tpf->on_ranks([&](int r) {
    auto& f = dynamic_cast<GpuForward&>(tpf->rank(r));
    f.cache().fill_random(7 + uint64_t(r), f.stream());
    std::vector<PageTable*> ptrs;
    for (PageTable& t : tables[size_t(r)]) {
      f.reserve(t, context);
      t.length = context;
      ptrs.push_back(&t);
    }
    std::vector<int32_t> first(size_t(batch), 1);
    f.decode_greedy(ptrs, first, warm, policies);  // captures the graph, warms clocks and caches
    seconds[size_t(r)] = f.decode_greedy(ptrs, first, steps, policies).seconds;
    kv[size_t(r)] = f.decode_bytes_read(mean_len, 0) * batch;
    weights[size_t(r)] = double(f.weights().bytes() - (f.weights().lm_head.rows ? f.weights().embed.data.bytes() : 0));
    reduce_us[size_t(r)] = time_all_reduce(f, size_t(batch) * c.hidden_size, 100);
  });
  TensorParallelPoint p;
  p.tp = tp;
  p.batch = batch;
  p.context = context;
  p.steps = steps;
  p.ms_per_step = *std::max_element(seconds.begin(), seconds.end()) * 1e3 / steps;
  p.weight_bytes = *std::max_element(weights.begin(), weights.end());
  p.kv_bytes = *std::max_element(kv.begin(), kv.end());
  p.all_reduce_us = *std::max_element(reduce_us.begin(), reduce_us.end());
  p.all_reduces = tp > 1 ? 2 * c.num_layers + 1 : 0;
  p.floor_ms = (p.weight_bytes + p.kv_bytes) / copy_bw * 1e3 + p.all_reduces * p.all_reduce_us * 1e-3;
  return p;
}

}  // namespace skim::cuda
