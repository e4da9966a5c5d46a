// GEMV bandwidth by x rows (N) on the 8B shape's projections: the FMA kernel (R weight rows per
// warp as gemv runs it) against the tensor-core kernel, which gemv runs from kGemvMmaMinRows
// rows. Standalone: nvcc -O3 -arch=sm_90a -std=c++20 -Isrc bench/gemv_rows.cu -o gemv_rows
#include <cstdio>
#include <vector>

#include "../src/backend/cuda/gemv.cu"

using namespace skim::cuda;

float time_us(GemvKernel kind, const uint16_t* x, const uint16_t* w, float* y, int n, int out, int in) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 5; ++i) gemv_with(x, w, y, n, out, in, kind, nullptr);
  cudaEventRecord(a);
  const int reps = 50;
  for (int i = 0; i < reps; ++i) gemv_with(x, w, y, n, out, in, kind, nullptr);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1000 / reps;
}

// The tensor-core kernel's shapes other than gemv's (warps per CTA x steps in flight per warp).
template <int WARPS, int UNROLL>
float time_mma_us(const uint16_t* x, const uint16_t* w, float* y, int n, int out, int in) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const int blocks = (out + 15) / 16;
  for (int i = 0; i < 5; ++i) gemv_mma_kernel<WARPS, UNROLL><<<blocks, WARPS * 32>>>(x, w, y, n, out, in);
  cudaEventRecord(a);
  const int reps = 50;
  for (int i = 0; i < reps; ++i) gemv_mma_kernel<WARPS, UNROLL><<<blocks, WARPS * 32>>>(x, w, y, n, out, in);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1000 / reps;
}

// The FMA kernel with R weight rows a warp and U chunks unrolled, at n x rows (launch<N, R, U>).
template <int N, int R, int U>
float time_fma_us(const uint16_t* x, const uint16_t* w, float* y, int out, int in) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 5; ++i) launch<N, R, U>(x, w, y, out, in, nullptr);
  cudaEventRecord(a);
  const int reps = 50;
  for (int i = 0; i < reps; ++i) launch<N, R, U>(x, w, y, out, in, nullptr);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1000 / reps;
}

int main() {
  const int shapes[][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
  size_t maxw = 0;
  for (auto& s : shapes) maxw = std::max(maxw, size_t(s[0]) * s[1]);
  uint16_t *x, *w;
  float* y;
  cudaMalloc(&x, 8 * 14336 * 2);
  cudaMalloc(&w, maxw * 2);
  cudaMalloc(&y, 8 * 128256 * 4);
  cudaMemset(x, 0x3f, 8 * 14336 * 2);
  cudaMemset(w, 0x3c, maxw * 2);
  printf("| out | in | N | fma us | fma GB/s | mma us | mma GB/s |\n|---|---|---|---|---|---|---|\n");
  for (auto& s : shapes)
    for (int n : {1, 2, 3, 4, 8}) {
      const double mb = double(s[0]) * s[1] * 2 / 1e6;
      const float f = time_us(GemvKernel::kFma, x, w, y, n, s[0], s[1]);
      const float m = time_us(GemvKernel::kMma, x, w, y, n, s[0], s[1]);
      printf("| %d | %d | %d | %.1f | %.0f | %.1f | %.0f |\n", s[0], s[1], n, f, mb * 1e3 / f, m, mb * 1e3 / m);
    }
  printf("\ntensor-core kernel shapes at 8 rows, GB/s\n| out | in | 4x4 | 4x8 | 8x2 | 8x4 | 8x8 | 16x2 | 16x4 |\n|---|---|---|---|---|---|---|---|---|\n");
  for (auto& s : shapes) {
    const double mb = double(s[0]) * s[1] * 2 / 1e6;
    auto gbs = [&](float us) { return mb * 1e3 / us; };
    printf("| %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", s[0], s[1],
           gbs(time_mma_us<4, 4>(x, w, y, 8, s[0], s[1])), gbs(time_mma_us<4, 8>(x, w, y, 8, s[0], s[1])),
           gbs(time_mma_us<8, 2>(x, w, y, 8, s[0], s[1])), gbs(time_mma_us<8, 4>(x, w, y, 8, s[0], s[1])),
           gbs(time_mma_us<8, 8>(x, w, y, 8, s[0], s[1])), gbs(time_mma_us<16, 2>(x, w, y, 8, s[0], s[1])),
           gbs(time_mma_us<16, 4>(x, w, y, 8, s[0], s[1])));
  }
  printf("\nFMA kernel at 2 rows by R x U (weight rows a warp x chunks unrolled), GB/s; one row (R 1, U 4) first\n"
         "| out | in | N1 1x4 | 1x4 | 1x8 | 2x2 | 2x4 | 2x8 | 4x2 |\n|---|---|---|---|---|---|---|---|---|\n");
  for (auto& s : shapes) {
    const double mb = double(s[0]) * s[1] * 2 / 1e6;
    auto gbs = [&](float us) { return mb * 1e3 / us; };
    printf("| %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", s[0], s[1],
           gbs(time_fma_us<1, 1, 4>(x, w, y, s[0], s[1])), gbs(time_fma_us<2, 1, 4>(x, w, y, s[0], s[1])),
           gbs(time_fma_us<2, 1, 8>(x, w, y, s[0], s[1])), gbs(time_fma_us<2, 2, 2>(x, w, y, s[0], s[1])),
           gbs(time_fma_us<2, 2, 4>(x, w, y, s[0], s[1])), gbs(time_fma_us<2, 2, 8>(x, w, y, s[0], s[1])),
           gbs(time_fma_us<2, 4, 2>(x, w, y, s[0], s[1])));
  }
  return 0;
}
