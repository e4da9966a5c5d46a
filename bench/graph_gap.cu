// What a kernel boundary costs inside a CUDA graph, apart from the kernel's own work: a decode
// step of the 8B shape is ~390 kernels (12 a layer), and end to end a step ran 1.7 ms longer
// than the sum of its kernels' ncu durations (streaming 10% b8 32K, H200 2026-11-28). Standalone:
//   nvcc -O3 -arch=sm_90a -std=c++20 -Isrc bench/graph_gap.cu -o graph_gap && ./graph_gap
// Each row: a graph of N kernels, each reading `MB` distinct bytes (nothing reused from L2) with
// `ctas` CTAs of 512 threads, launched with or without programmatic dependent launch (pdl.cuh),
// replayed 20 times; us per kernel, and that less the bytes at the rate of one large read.
#include <cstdio>
#include <vector>

#include "../src/backend/cuda/pdl.cuh"

namespace {

__global__ void __launch_bounds__(512) read_kernel(const uint4* x, size_t n, unsigned* sink) {
  skim::cuda::detail::pdl_enter();
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(x + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

float graph_us_per_kernel(const uint4* base, size_t total16, size_t each16, int ctas, int kernels, bool pdl,
                          unsigned* sink, cudaStream_t s) {
  cudaGraph_t g;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int k = 0; k < kernels; ++k) {
    const uint4* x = base + (each16 == 0 ? 0 : (size_t(k) * each16) % (total16 - each16));
    if (pdl)
      (void)skim::cuda::launch_pdl(read_kernel, dim3(ctas), dim3(512), 0, s, x, each16, sink);
    else
      read_kernel<<<ctas, 512, 0, s>>>(x, each16, sink);
  }
  cudaStreamEndCapture(s, &g);
  cudaGraphExec_t e;
  cudaGraphInstantiate(&e, g, 0);
  for (int i = 0; i < 3; ++i) cudaGraphLaunch(e, s);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int reps = 20;
  cudaEventRecord(e0, s);
  for (int i = 0; i < reps; ++i) cudaGraphLaunch(e, s);
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) printf("CUDA error %s\n", cudaGetErrorString(err));
  return ms * 1000 / (reps * kernels);
}

}  // namespace

int main() {
  const size_t total = size_t(8) << 30;  // 8 GB: a graph's reads never come back to L2
  uint4* x;
  unsigned* sink;
  if (cudaMalloc(&x, total) != cudaSuccess) return 1;
  cudaMalloc(&sink, 4);
  cudaMemset(x, 1, total);
  cudaStream_t s;
  cudaStreamCreate(&s);
  const size_t total16 = total / 16;
  // The rate of one large read (1 GB, 132 x 8 CTAs), the reference for the kernels' own work.
  const float big_us = graph_us_per_kernel(x, total16, (size_t(1) << 30) / 16, 132 * 8, 8, true, sink, s);
  const double bw = double(1 << 30) / (big_us * 1e-6);
  printf("one 1 GB read: %.1f us, %.0f GB/s\n", big_us, bw / 1e9);
  printf("| kernels | MB each | CTAs | pdl | us per kernel | us at the 1 GB rate | overhead us |\n|---|---|---|---|---|---|---|\n");
  for (double mb : {0.0, 0.5, 4.0, 32.0, 128.0})
    for (int ctas : {132, 528})
      for (bool pdl : {true, false}) {
        const size_t each16 = size_t(mb * (1 << 20)) / 16;
        const float us = graph_us_per_kernel(x, total16, each16, ctas, 384, pdl, sink, s);
        const double ideal = double(each16) * 16 / bw * 1e6;
        printf("| 384 | %.1f | %d | %s | %.2f | %.2f | %.2f |\n", mb, ctas, pdl ? "yes" : "no", us, ideal, us - ideal);
      }
  return 0;
}
