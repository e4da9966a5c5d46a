// ART decode attention alone on the 8B shape (32 q / 8 KV heads of 128, 16-token pages, each
// list its sequence's pages in order), against paged decode attention over the same cache: where
// ART's time goes beyond the pages it reads. Standalone (it includes the kernels' .cu files, so a
// copy under another revision's tree times that revision's kernel):
//   nvcc -O3 -arch=sm_90a -std=c++20 -Isrc -Iinclude bench/art_bw.cu -o art_bw && ./art_bw
// Rows: eps so loose that every list stops at round `patience` (rounds of 64 pages, the lag the
// kernel's least plus two), or never stops (lag 99999: no verdict is ever awaited). Each time is
// the mean over 100 calls in a CUDA graph, the K/V rotated over copies so that reads hit HBM.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "../src/backend/cuda/art_decode_attention.cu"
#include "../src/backend/cuda/paged_decode_attention.cu"

namespace skim::cuda::art_bw {

__global__ void fill_bf16(uint16_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    x[i] = uint16_t(__float_as_uint(float(h & 0xffff) / 32768.0f - 1.0f) >> 16);
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    printf("%s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

template <class F>
double graph_us(int calls, F enqueue) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cudaGraph_t g;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < calls; ++i) enqueue(i, s);
  check(cudaStreamEndCapture(s, &g), "end capture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, g, 0), "instantiate");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(e0, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(e1, s);
    check(cudaEventSynchronize(e1), "graph");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    best = std::min(best, ms);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return best * 1e3 / calls;
}

void run_shape(int batch, int context) {
  const int H = 8, heads = 32, D = 128, page = 16, pages = context / page;
  const size_t pool = size_t(batch) * pages * H * page * D;
  const double kv_bytes = 2.0 * pool * 2;
  const int copies = std::clamp(int(256e6 / kv_bytes + 0.999), 1, 64);
  uint16_t *k, *v, *q;
  float *o, *lse;
  check(cudaMalloc(&k, pool * copies * 2), "malloc k");
  check(cudaMalloc(&v, pool * copies * 2), "malloc v");
  check(cudaMalloc(&q, size_t(batch) * heads * D * 2), "malloc q");
  check(cudaMalloc(&o, size_t(batch) * heads * D * 4), "malloc o");
  check(cudaMalloc(&lse, size_t(batch) * heads * 4), "malloc lse");
  fill_bf16<<<1024, 256>>>(k, pool * copies, 1);
  fill_bf16<<<1024, 256>>>(v, pool * copies, 2);
  fill_bf16<<<64, 256>>>(q, size_t(batch) * heads * D, 3);
  // Dense: one table per sequence; ART: one list per (sequence, KV head), the same pages.
  std::vector<int32_t> t(size_t(batch) * pages), lt(size_t(batch) * H * pages), l(batch, context), ll(batch * H, context);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < pages; ++i) {
      t[size_t(b) * pages + i] = b * pages + i;
      for (int h = 0; h < H; ++h) lt[(size_t(b) * H + h) * pages + i] = b * pages + i;
    }
  int32_t *table, *lens, *ltable, *llens;
  check(cudaMalloc(&table, t.size() * 4), "malloc");
  check(cudaMalloc(&lens, l.size() * 4), "malloc");
  check(cudaMalloc(&ltable, lt.size() * 4), "malloc");
  check(cudaMalloc(&llens, ll.size() * 4), "malloc");
  cudaMemcpy(table, t.data(), t.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(lens, l.data(), l.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(ltable, lt.data(), lt.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(llens, ll.data(), ll.size() * 4, cudaMemcpyHostToDevice);
  PagedDecodeArgs dense{.batch = batch, .num_heads = heads, .num_kv_heads = H, .head_dim = D,
                        .max_pages_per_seq = pages, .max_seq_len = context, .scale = 1.0f / std::sqrt(float(D)),
                        .q = q, .page_table = table, .seq_lens = lens, .o = o, .lse = lse};
  ArtDecodeArgs art{.attn = dense, .art = {.round_pages = 64, .patience = 1, .eps_scale = 1e30f, .eps_dir = 1e30f}};
  art.attn.tables_per_kv_head = true;
  art.attn.page_table = ltable;
  art.attn.seq_lens = llens;
  const int least_lag = art_decode_lag(art);
  void* ws;
  const size_t ws_bytes = std::max(art_decode_workspace_size(art), paged_decode_workspace_size(dense));
  check(cudaMalloc(&ws, ws_bytes), "malloc ws");
  check(cudaMemset(ws, 0, ws_bytes), "memset ws");
  dense.workspace = art.attn.workspace = ws;
  dense.workspace_bytes = art.attn.workspace_bytes = ws_bytes;
  ArtDecodeStats* stats;
  check(cudaMalloc(&stats, sizeof(ArtDecodeStats)), "malloc stats");
  const auto at_copy = [&](PagedDecodeArgs& a, int i) {
    a.k_pool = k + size_t(i % copies) * pool;
    a.v_pool = v + size_t(i % copies) * pool;
  };
  const double dense_us = graph_us(100, [&](int i, cudaStream_t s) {
    at_copy(dense, i);
    check(paged_decode_attention(dense, s), "paged_decode_attention");
  });
  printf("| %d | %d | dense | - | 1.000 | %.1f | %.2f | 1.00 |\n", batch, context, dense_us, dense_us / (kv_bytes / 3.0e6));
  const int rounds = (pages + 63) / 64;
  for (int patience : {1, 2, 4, 8, 0}) {
    art.art.patience = patience > 0 ? patience : rounds;
    art.art.lag_rounds = patience > 0 ? least_lag : 99999;
    cudaMemset(stats, 0, sizeof(ArtDecodeStats));
    const double us = graph_us(100, [&](int i, cudaStream_t s) {
      at_copy(art.attn, i);
      check(art_decode_attention(art, s), "art_decode_attention");
    });
    // The pages read: one more call, counted.
    ArtDecodeStats st;
    art.stats = stats;
    at_copy(art.attn, 0);
    check(art_decode_attention(art, nullptr), "art_decode_attention");
    cudaMemcpy(&st, stats, sizeof st, cudaMemcpyDeviceToHost);
    art.stats = nullptr;
    const double read = st.pages_listed ? double(st.pages_read) / double(st.pages_listed) : 1.0;
    char stop[16];
    snprintf(stop, sizeof stop, patience > 0 ? "%d" : "never", patience);
    printf("| %d | %d | %s | %d | %.3f | %.1f | %.2f | %.2f |\n", batch, context, stop, art.art.lag_rounds, read, us,
           us / (kv_bytes * read / 3.0e6), us / (dense_us * read));
  }
  check(cudaGetLastError(), "run");
  cudaFree(k), cudaFree(v), cudaFree(q), cudaFree(o), cudaFree(lse), cudaFree(table), cudaFree(lens);
  cudaFree(ltable), cudaFree(llens), cudaFree(ws), cudaFree(stats);
}

}  // namespace skim::cuda::art_bw

int main() {
  using namespace skim::cuda::art_bw;
  printf("ART decode attention, 8B shape, rounds of 64 pages (x floor: bytes read / 3.0 TB/s; x dense: time / (dense's x read))\n");
  printf("| batch | context | stop round | lag | read | us | x floor | x dense |\n|---|---|---|---|---|---|---|---|\n");
  for (int batch : {1, 8})
    for (int context : {32768, 131072}) run_shape(batch, context);
  return 0;
}
