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

// Time of one call, us, over `copies` copies of the weights taken in turn (at least 400 MB in all,
// 8x the H200's L2): the step's projections each read weights no call before left in L2, where the
// tables above re-read one copy (the 4096 x 4096 projection's 32 MB fit the L2).
template <class F>
float rotating_us(int copies, F call) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < copies; ++i) call(i);
  cudaEventRecord(a);
  const int reps = 4 * copies;
  for (int i = 0; i < reps; ++i) call(i % copies);
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
  // At two rows, the FMA kernel by R x U (weight rows a warp x chunks unrolled; launch<N, R, U>)
  // and the tensor-core kernel, against one row's FMA kernel, weights rotating (rotating_us).
  printf("\nus a call at 2 rows, weights never in L2 (copies taken in turn); one row's FMA kernel first\n"
         "| out | in | N1 fma 1x4 | 1x4 | 1x8 | 2x2 | 2x4 | 2x8 | mma 16x4 | N1 mma |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto& s : shapes) {
    const size_t elems = size_t(s[0]) * s[1];
    const int copies = int(std::max<size_t>(2, (400u << 20) / (elems * 2) + 1));
    uint16_t* wc;
    cudaMalloc(&wc, elems * 2 * copies);
    cudaMemset(wc, 0x3c, elems * 2 * copies);
    auto at = [&](int i) { return wc + elems * i; };
    const int out = s[0], in = s[1];
    printf("| %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", out, in,
           rotating_us(copies, [&](int i) { launch<1, 1, 4>(x, at(i), y, out, in, nullptr); }),
           rotating_us(copies, [&](int i) { launch<2, 1, 4>(x, at(i), y, out, in, nullptr); }),
           rotating_us(copies, [&](int i) { launch<2, 1, 8>(x, at(i), y, out, in, nullptr); }),
           rotating_us(copies, [&](int i) { launch<2, 2, 2>(x, at(i), y, out, in, nullptr); }),
           rotating_us(copies, [&](int i) { launch<2, 2, 4>(x, at(i), y, out, in, nullptr); }),
           rotating_us(copies, [&](int i) { launch<2, 2, 8>(x, at(i), y, out, in, nullptr); }),
           rotating_us(copies, [&](int i) { launch_mma(x, at(i), y, 2, out, in, nullptr); }),
           rotating_us(copies, [&](int i) { launch_mma(x, at(i), y, 1, out, in, nullptr); }));
    cudaFree(wc);
  }
  return 0;
}
