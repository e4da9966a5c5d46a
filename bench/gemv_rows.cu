// GEMV bandwidth by x rows (N) and weight rows per warp (R) on the 8B shape's projections:
// which R keeps a decode step with a few rows (RetroAttention's past rows, small batches) at the
// one-row bandwidth. Standalone: nvcc -O3 -arch=sm_90a -std=c++20 -Isrc bench/gemv_rows.cu
#include <cstdio>
#include <vector>

#include "../src/backend/cuda/gemv.cu"

using namespace skim::cuda;

template <int N, int R>
float time_us(const uint16_t* x, const uint16_t* w, float* y, int out, int in, int blocks_per_sm) {
  const int rows_per_block = 256 / 32 * R;
  const int blocks = std::min((out + rows_per_block - 1) / rows_per_block, 132 * blocks_per_sm);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 5; ++i) gemv_kernel<N, R><<<blocks, 256>>>(x, w, y, out, in);
  cudaEventRecord(a);
  const int reps = 50;
  for (int i = 0; i < reps; ++i) gemv_kernel<N, R><<<blocks, 256>>>(x, w, y, out, in);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1000 / reps;
}

template <int N>
void row(const uint16_t* x, const uint16_t* w, float* y, int out, int in) {
  const double mb = double(out) * in * 2 / 1e6;
  printf("out %5d in %5d N %d |", out, in, N);
  printf(" R1 %6.1f us %5.0f GB/s |", time_us<N, 1>(x, w, y, out, in, 16), mb * 1e3 / time_us<N, 1>(x, w, y, out, in, 16));
  printf(" R2 %6.1f us %5.0f GB/s |", time_us<N, 2>(x, w, y, out, in, 16), mb * 1e3 / time_us<N, 2>(x, w, y, out, in, 16));
  printf(" R4 %6.1f us %5.0f GB/s\n", time_us<N, 4>(x, w, y, out, in, 16), mb * 1e3 / time_us<N, 4>(x, w, y, out, in, 16));
}

int main() {
  const int shapes[][2] = {{4096, 4096}, {1024, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
  size_t maxw = 0;
  for (auto& s : shapes) maxw = std::max(maxw, size_t(s[0]) * s[1]);
  uint16_t *x, *w;
  float* y;
  cudaMalloc(&x, 8 * 14336 * 2);
  cudaMalloc(&w, maxw * 2);
  cudaMalloc(&y, 8 * 128256 * 4);
  cudaMemset(x, 0x3f, 8 * 14336 * 2);
  cudaMemset(w, 0x3c, maxw * 2);
  for (auto& s : shapes) {
    row<1>(x, w, y, s[0], s[1]);
    row<2>(x, w, y, s[0], s[1]);
    row<4>(x, w, y, s[0], s[1]);
    row<8>(x, w, y, s[0], s[1]);
  }
  return 0;
}
