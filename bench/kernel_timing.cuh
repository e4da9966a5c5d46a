// Pieces the standalone kernel benches share (bench/select_bw.cu, bench/group_select_bw.cu):
// a launch's mean time over back-to-back repeats, random bf16 page digests, and a page
// selection's inputs and outputs on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace skim::bench {

// Mean microseconds of launch() over 50 back-to-back calls, after 5 warm-up calls.
template <class F>
float time_us(F launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 5; ++i) launch();
  const int reps = 50;
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) launch();
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) printf("CUDA error %s\n", cudaGetErrorString(err));
  return ms * 1000 / reps;
}

// n random bf16 pairs in [-1, 1): lo[i] <= hi[i] (a page's min and max digest), or lo alone
// (hi null: a query).
__global__ void fill_digests(uint16_t* lo, uint16_t* hi, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    const float x = float(h & 0xffff) / 32768.0f - 1.0f, y = float(h >> 16) / 32768.0f - 1.0f;
    const float mn = fminf(x, y), mx = fmaxf(x, y);
    lo[i] = uint16_t(__float_as_uint(mn) >> 16);
    if (hi) hi[i] = uint16_t(__float_as_uint(mx) >> 16);
  }
}

__global__ void empty_kernel() {}

// A page selection's device buffers on the 8B shape (32 query / 8 KV heads of 128, 16-token
// pages): `batch` sequences of `context` tokens, each sequence's pages in order, random digests
// and queries, and the outputs (a list, mask and length per (sequence, KV head)).
struct SelectionBuffers {
  static constexpr int kKvHeads = 8, kHeads = 32, kDim = 128, kPage = 16;
  int batch, context, pages;
  size_t digest_elems;
  uint16_t *kmin, *kmax, *q;
  int32_t *table, *lens, *out_table, *out_lens;
  uint32_t* out_masks;

  SelectionBuffers(int b, int ctx) : batch(b), context(ctx), pages(ctx / kPage) {
    digest_elems = size_t(batch) * pages * kKvHeads * kDim;
    const size_t lists = size_t(batch) * kKvHeads;
    cudaMalloc(&kmin, digest_elems * 2);
    cudaMalloc(&kmax, digest_elems * 2);
    cudaMalloc(&q, size_t(batch) * kHeads * kDim * 2);
    cudaMalloc(&table, size_t(batch) * pages * 4);
    cudaMalloc(&lens, batch * 4);
    cudaMalloc(&out_table, lists * pages * 4);
    cudaMalloc(&out_masks, lists * pages * 4);
    cudaMalloc(&out_lens, lists * 4);
    fill_digests<<<1024, 256>>>(kmin, kmax, digest_elems, 7);
    fill_digests<<<64, 256>>>(q, nullptr, size_t(batch) * kHeads * kDim, 3);
    std::vector<int32_t> t(size_t(batch) * pages), l(batch, context);
    for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(i);
    cudaMemcpy(table, t.data(), t.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(lens, l.data(), l.size() * 4, cudaMemcpyHostToDevice);
  }
  ~SelectionBuffers() {
    cudaFree(kmin), cudaFree(kmax), cudaFree(q), cudaFree(table), cudaFree(lens), cudaFree(out_table);
    cudaFree(out_masks), cudaFree(out_lens);
  }
  SelectionBuffers(const SelectionBuffers&) = delete;
  SelectionBuffers& operator=(const SelectionBuffers&) = delete;

  // The fields every selection's arguments share (Args: QuestPageSelectArgs, GroupPageSelectArgs).
  template <class Args>
  void fill(Args& a) const {
    a.batch = batch, a.num_heads = kHeads, a.num_kv_heads = kKvHeads, a.head_dim = kDim, a.page_size = kPage;
    a.max_pages_per_seq = pages;
    a.q = q, a.kmin = kmin, a.kmax = kmax, a.page_table = table, a.seq_lens = lens;
    a.out_table = out_table, a.out_masks = out_masks, a.out_lens = out_lens;
  }
};

}  // namespace skim::bench
