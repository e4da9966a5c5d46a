// The projections of a decode step (a few rows): y[r] = W . x[r], W bf16 [out][in] streamed
// once from HBM with 16-byte loads, x rows bf16 (L1-resident, shared by every warp of an SM),
// fp32 accumulation. A warp takes one output row (one x row) or four (several x rows), rows
// strided over the grid; loads are unrolled so that enough bytes are in flight for HBM. cuBLAS picks kernels tuned
// for large products; at one to eight rows this reaches more of the bandwidth.
#include <algorithm>

#include "backend/cuda/ops.cuh"
#include "backend/cuda/pdl.cuh"

namespace skim::cuda {

namespace {

__device__ __forceinline__ void unpack_bf16x8(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Warp w computes rows [R w, R w + R) (strided over the grid): each x chunk it loads serves R
// weight rows, which keeps the x traffic through L1 below the weight traffic from HBM when
// there are several x rows (N > 1).
template <int N, int R>
__global__ void __launch_bounds__(256) gemv_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                                                   float* __restrict__ y, int out, int in) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  const int lane = threadIdx.x & 31;
  const int warps = int(gridDim.x * blockDim.x) >> 5;
  const int in8 = in >> 3;
  for (int row0 = (int(blockIdx.x * blockDim.x + threadIdx.x) >> 5) * R; row0 < out; row0 += warps * R) {
    const uint4* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r)  // rows past the end re-read row0 and are not written
      wr[r] = reinterpret_cast<const uint4*>(w + size_t(row0 + r < out ? row0 + r : row0) * in);
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int n = 0; n < N; ++n) acc[r][n] = 0.0f;
#pragma unroll(R == 1 ? 4 : 2)
    for (int c = lane; c < in8; c += 32) {
      float xf[N][8];
#pragma unroll
      for (int n = 0; n < N; ++n) unpack_bf16x8(__ldg(reinterpret_cast<const uint4*>(x + size_t(n) * in) + c), xf[n]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float wf[8];
        unpack_bf16x8(__ldcs(wr[r] + c), wf);
#pragma unroll
        for (int n = 0; n < N; ++n)
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[r][n] = fmaf(wf[k], xf[n][k], acc[r][n]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float s = acc[r][n];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && row0 + r < out) y[size_t(n) * out + row0 + r] = s;
      }
  }
}

// R per N, measured on the H100 over the 8B shape's projections (bench/gemv_rows.cu,
// bench/results/2026-11-26-h100-gemv-rows/before.txt): R = 4 for every N > 1 left two x rows at
// 0.55-0.7 of the one-row bandwidth on the 4096-row projections (a batch-2 step, or
// RetroAttention's at w = 2, paid ~1.5-3 ms on the 8B shape); R = 2 is within a few percent of
// the best up to four rows, R = 4 from five (batch 8 ran 1% slower end to end with R = 2). R = 1
// at two rows on the projections of at most 8192 outputs, faster there in isolation (o 15.2
// against 15.7 us), was 0.5-1% slower end to end (Retro's w = 2 and quest at b2, 32K, H100,
// 2026-11-26): not taken.
template <int N>
void launch(const uint16_t* x, const uint16_t* w, float* y, int out, int in, cudaStream_t s) {
  constexpr int R = N == 1 ? 1 : N <= 4 ? 2 : 4;
  const int rows_per_block = 256 / 32 * R;
  const int blocks = std::min((out + rows_per_block - 1) / rows_per_block, 132 * 16);
  (void)launch_pdl(gemv_kernel<N, R>, blocks, 256, 0, s, x, w, y, out, in);
}

}  // namespace

bool gemv(const uint16_t* x, const uint16_t* w, float* y, int n, int out, int in, cudaStream_t s) {
  if (n < 1 || n > kGemvMaxRows || in % 8 != 0) return false;
  switch (n) {
    case 1: launch<1>(x, w, y, out, in, s); break;
    case 2: launch<2>(x, w, y, out, in, s); break;
    case 3: launch<3>(x, w, y, out, in, s); break;
    case 4: launch<4>(x, w, y, out, in, s); break;
    case 5: launch<5>(x, w, y, out, in, s); break;
    case 6: launch<6>(x, w, y, out, in, s); break;
    case 7: launch<7>(x, w, y, out, in, s); break;
    default: launch<8>(x, w, y, out, in, s); break;
  }
  return true;
}

}  // namespace skim::cuda
