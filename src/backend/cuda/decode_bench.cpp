#include "backend/cuda/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "attention/policy.h"
#include "backend/cuda/gpu_forward.h"
#include "backend/cuda/ops.cuh"
#include "backend/cuda/paged_decode_attention.cuh"

namespace skim::cuda {

double copy_bandwidth(size_t bytes) {
  DeviceBuffer<uint8_t> src(bytes), dst(bytes);
  check(cudaMemset(src.data(), 1, bytes), "cudaMemset");
  double best = 1e30;
  for (int i = 0; i < 6; ++i)
    best = std::min(best, gpu_time_ms(nullptr, [&] {
                      check(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, nullptr),
                            "cudaMemcpyAsync");
                    }));
  return 2.0 * double(bytes) / (best / 1e3);
}

AttentionPoint bench_decode_attention(int batch, int context, int heads, int kv_heads, int d, double copy_bw) {
  const int page = 16, pages_per_seq = (context + page - 1) / page;
  const size_t pool_elems = size_t(batch) * pages_per_seq * kv_heads * page * d;
  const double kv_bytes = 2.0 * double(batch) * context * kv_heads * d * 2;
  // Enough copies of the cache to exceed L2 (50-60 MB) several times over.
  const int copies = int(std::clamp(std::ceil(256e6 / kv_bytes), 1.0, 64.0));
  DeviceBuffer<uint16_t> k(pool_elems * copies), v(pool_elems * copies), q(size_t(batch) * heads * d);
  DeviceBuffer<float> o(size_t(batch) * heads * d), lse(size_t(batch) * heads);
  fill_random_bf16(k.data(), k.size(), 1, 1.0f, nullptr);
  fill_random_bf16(v.data(), v.size(), 2, 1.0f, nullptr);
  fill_random_bf16(q.data(), q.size(), 3, 1.0f, nullptr);
  std::vector<int32_t> table(size_t(batch) * pages_per_seq), lens(size_t(batch), context);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  DeviceBuffer<int32_t> d_table, d_lens;
  upload(d_table, table.data(), table.size());
  upload(d_lens, lens.data(), lens.size());

  PagedDecodeArgs a;
  a.batch = batch;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = d;
  a.max_pages_per_seq = pages_per_seq;
  a.max_seq_len = context;
  a.scale = 1.0f / std::sqrt(float(d));
  a.q = q.data();
  a.page_table = d_table.data();
  a.seq_lens = d_lens.data();
  a.o = o.data();
  a.lse = lse.data();
  DeviceBuffer<uint8_t> ws(std::max<size_t>(paged_decode_workspace_size(a), 1));
  check(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset");
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();

  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  const int calls = std::max(copies, 100);
  auto enqueue_calls = [&] {
    for (int i = 0; i < calls; ++i) {
      a.k_pool = k.data() + (i % copies) * pool_elems;
      a.v_pool = v.data() + (i % copies) * pool_elems;
      check(paged_decode_attention(a, s), "paged_decode_attention");
    }
  };
  cudaGraph_t g;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  enqueue_calls();
  check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep)
    best = std::min(best, gpu_time_ms(s, [&] { check(cudaGraphLaunch(exec, s), "cudaGraphLaunch"); }));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);

  AttentionPoint p;
  p.batch = batch;
  p.context = context;
  p.us = best * 1e3 / calls;
  p.bytes = kv_bytes + double(batch) * heads * d * (2 + 4) + double(batch) * heads * 4;
  p.fraction = p.bytes / (p.us * 1e-6) / copy_bw;
  return p;
}

EndToEndPoint bench_end_to_end(std::shared_ptr<const GpuWeights> weights, int batch, int context, int steps, double copy_bw) {
  const ModelConfig& c = weights->config;
  const int warm = 4, page = 16;
  const int pages_per_seq = (context + warm + steps + page - 1) / page;
  KVCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.page_size = page;
  shape.num_pages = pages_per_seq * batch;
  const size_t weight_total = weights->bytes();
  const size_t embed_bytes = weights->embed.data.bytes();
  const bool tied = weights->lm_head.rows == 0;
  GpuForwardOptions o;
  o.max_rows = batch;
  o.max_pages_per_seq = pages_per_seq;
  GpuForward fwd(weights, shape, o);
  fwd.cache().fill_random(7, fwd.stream());

  std::vector<PageTable> tables(static_cast<size_t>(batch));
  std::vector<PageTable*> ptrs;
  for (PageTable& t : tables) {
    fwd.cache().pool().reserve(t, context);
    t.length = context;
    ptrs.push_back(&t);
  }
  std::vector<int32_t> first(size_t(batch), 1);
  fwd.decode_greedy(ptrs, first, warm);  // captures the graph, warms clocks and caches
  const DecodeRun run = fwd.decode_greedy(ptrs, first, steps);

  EndToEndPoint p;
  p.batch = batch;
  p.context = context;
  p.steps = steps;
  p.ms_per_step = run.seconds * 1e3 / steps;
  // A step reads every weight once, except the embedding table (only its rows for the batch's
  // tokens), which a tied model reads whole as the output projection.
  p.weight_bytes = double(tied ? weight_total : weight_total - embed_bytes);
  const double mean_len = context + warm + (steps + 1) / 2.0;
  p.kv_bytes = double(batch) * mean_len * double(fwd.cache().bytes_per_token());
  p.floor_ms = (p.weight_bytes + p.kv_bytes) / copy_bw * 1e3;
  return p;
}

double bench_prefill(std::shared_ptr<const GpuWeights> weights, int context, int chunk) {
  const ModelConfig& c = weights->config;
  KVCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.num_pages = (context + 15) / 16;
  GpuForwardOptions o;
  o.max_rows = chunk;
  o.max_pages_per_seq = shape.num_pages;
  GpuForward fwd(weights, shape, o);
  PageTable table;
  fwd.cache().pool().reserve(table, context);
  std::vector<PageTable*> tables(size_t(chunk), &table);
  auto dense = make_policy("dense");  // the GPU forward attends densely itself
  std::vector<float> logits;
  const auto start = std::chrono::steady_clock::now();
  for (int b = 0; b < context; b += chunk) {
    ForwardBatch fb;
    for (int p = b; p < std::min(context, b + chunk); ++p) {
      fb.tokens.push_back(int32_t((uint32_t(p) * 2654435761u) % uint32_t(c.vocab_size)));
      fb.positions.push_back(p);
      fb.tables.push_back(&table);
    }
    fb.logits_rows.push_back(int(fb.tokens.size()) - 1);
    fwd.run(fb, *dense, logits);
    table.length = fb.positions.back() + 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return context / s;
}

ModelConfig llama31_8b_config() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = 500000.0f;
  c.rope.type = "llama3";
  c.rope.factor = 8.0f;
  c.rope.low_freq_factor = 1.0f;
  c.rope.high_freq_factor = 4.0f;
  c.rope.original_max_position_embeddings = 8192;
  return c;
}

}  // namespace skim::cuda
