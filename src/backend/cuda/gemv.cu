// The projections of a decode step (a few rows): y[r] = W . x[r], W bf16 [out][in] streamed
// once from HBM with 16-byte loads, x rows bf16 (L1-resident, shared by every warp of an SM),
// fp32 accumulation. Fewer than kGemvMmaMinRows x rows: fp32 FMAs, a warp takes one output row
// (two for several x rows), rows strided over the grid, loads unrolled so that enough bytes are
// in flight for HBM. From kGemvMmaMinRows x rows: the tensor
// cores (gemv_mma_kernel), the x rows as the MMA's 8 columns. cuBLAS picks kernels tuned for large
// products; at one to eight rows these reach more of the bandwidth.
#include <algorithm>

#include "backend/cuda/mma_sync.cuh"
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
// there are several x rows (N > 1). U chunks of the input are unrolled, so R x U 16-byte weight
// loads a lane are in flight.
template <int N, int R, int U>
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
#pragma unroll(U)
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

// Up to eight x rows on the tensor cores: a CTA takes 16 weight rows (the MMA's m), its warps
// split the inputs (the k) in 32-element steps by turns, and the x rows are the MMA's 8 columns
// (those past n are zeros). The FMA kernel above re-read every x row from L1 for each weight
// chunk: at 8 rows it streamed the 8B shape's weights at 62% of HBM (2.07 TB/s against the
// attention kernel's 3.01 on an H100, 2026-11-27), where one row reaches 86%.
// Fragments without shuffles: a sum over k may visit k in any order, so a lane loads 16
// contiguous bytes of its two weight rows (g, g + 8) and of its x row (g), chunk t of a 32-wide
// step, and both MMAs of the step take the same k-permutation for A and B: the first MMA's k
// pairs {2t, 2t+1} and {2t+8, 2t+9} are the chunk's elements 0-1 and 2-3, the second's 4-5 and
// 6-7. The warps' partial tiles are summed in shared memory in warp order (deterministic).
// WARPS per CTA, UNROLL steps in flight per warp (1 KB of weights each); gemv runs kMmaWarps x
// kMmaUnroll. At eight rows on an H100 (bench/gemv_rows.cu, 2026-11-27) 16 x 4 against 8 x 4:
// 3398 against 2679 GB/s on the 4096 x 4096 projection, 2676 against 2311 on 4096 x 14336,
// 2839 against 2807 on 28672 x 4096, 2318 against 2372 on 6144 x 4096: a layer's four
// projections 158 us against 168. Four warps ran at 1572-2877.
constexpr int kMmaWarps = 16;
constexpr int kMmaUnroll = 4;

__device__ __forceinline__ uint4 load_chunk(const uint16_t* p, bool ok, bool stream) {
  if (!ok) return make_uint4(0, 0, 0, 0);
  return stream ? __ldcs(reinterpret_cast<const uint4*>(p)) : __ldg(reinterpret_cast<const uint4*>(p));
}

// The 16 x 8 tile's partial sums of every warp, added in warp order; lane (g, t) holds rows g
// and g + 8, columns 2t and 2t + 1 (mma_m16n8k16's c).
template <int WARPS>
__device__ __forceinline__ void store_tile(const float (&c)[4], float* y, int n, int out, int row0, int warp,
                                           int lane) {
  __shared__ float part[WARPS][4][32];
#pragma unroll
  for (int j = 0; j < 4; ++j) part[warp][j][lane] = c[j];
  __syncthreads();
  if (warp != 0) return;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float s = part[0][j][lane];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) s += part[w][j][lane];
    const int row = row0 + g + (j >= 2 ? 8 : 0), col = 2 * t + (j & 1);
    if (col < n && row < out) y[size_t(col) * out + row] = s;
  }
}

template <int WARPS, int UNROLL>
__global__ void __launch_bounds__(WARPS * 32) gemv_mma_kernel(const uint16_t* __restrict__ x,
                                                              const uint16_t* __restrict__ w,
                                                              float* __restrict__ y, int n, int out, int in) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 16;
  // Rows past the end re-read the last row and are not written.
  const uint16_t* wa = w + size_t(min(row0 + g, out - 1)) * in + 8 * t;
  const uint16_t* wb = w + size_t(min(row0 + g + 8, out - 1)) * in + 8 * t;
  const uint16_t* xr = x + size_t(min(g, n - 1)) * in + 8 * t;
  const bool has_x = g < n;
  const int steps = (in + 31) / 32;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s0 = warp; s0 < steps; s0 += WARPS * UNROLL) {
    uint4 va[UNROLL], vb[UNROLL], vx[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {  // every load of the round before any MMA
      const int k = (s0 + u * WARPS) * 32;
      const bool ok = k + 8 * t < in;  // in % 8 == 0: a chunk is whole or absent
      va[u] = load_chunk(wa + k, ok, true);
      vb[u] = load_chunk(wb + k, ok, true);
      vx[u] = load_chunk(xr + k, ok && has_x, false);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      detail::mma_m16n8k16(c, {va[u].x, vb[u].x, va[u].y, vb[u].y}, vx[u].x, vx[u].y);
      detail::mma_m16n8k16(c, {va[u].z, vb[u].z, va[u].w, vb[u].w}, vx[u].z, vx[u].w);
    }
  }
  store_tile<WARPS>(c, y, n, out, row0, warp, lane);
}

// R per N, measured on the H100 over the 8B shape's projections (bench/gemv_rows.cu,
// bench/results/2026-11-26-h100-gemv-rows/before.txt): R = 4 for every N > 1 left two x rows at
// 0.55-0.7 of the one-row bandwidth on the 4096-row projections (a batch-2 step, or
// RetroAttention's at w = 2, paid ~1.5-3 ms on the 8B shape); R = 2 is within a few percent of
// the best up to four rows, R = 4 from five (batch 8 ran 1% slower end to end with R = 2). R = 1
// at two rows on the projections of at most 8192 outputs, faster there in isolation (o 15.2
// against 15.7 us), was 0.5-1% slower end to end (Retro's w = 2 and quest at b2, 32K, H100,
// 2026-11-26): not taken.
//
// U: four chunks at one and two rows (R = 2 halves a projection's warps; four chunks keep a
// lane's bytes in flight at one row's), two from three. At two rows on an H200 U = 4 against 2
// was equal or up to 1% faster end to end (2026-11-29, session 35), and the gap to one row in a
// step stayed (ncu: down 37.1 against 29.4 us, o 14.0 against 12.1): the down projection goes to
// the tensor cores from two rows (gemv).
template <int N, int R = N == 1 ? 1 : N <= 4 ? 2 : 4, int U = N <= 2 ? 4 : 2>
void launch(const uint16_t* x, const uint16_t* w, float* y, int out, int in, cudaStream_t s) {
  const int rows_per_block = 256 / 32 * R;
  const int blocks = std::min((out + rows_per_block - 1) / rows_per_block, 132 * 16);
  (void)launch_pdl(gemv_kernel<N, R, U>, blocks, 256, 0, s, x, w, y, out, in);
}

void launch_mma(const uint16_t* x, const uint16_t* w, float* y, int n, int out, int in, cudaStream_t s) {
  (void)launch_pdl(gemv_mma_kernel<kMmaWarps, kMmaUnroll>, (out + 15) / 16, kMmaWarps * 32, 0, s, x, w, y, n, out,
                   in);
}

}  // namespace

bool gemv(const uint16_t* x, const uint16_t* w, float* y, int n, int out, int in, cudaStream_t s) {
  // Below kGemvMmaMinRows rows the FMA kernel, even where the tensor-core kernel's CTAs fit one
  // wave and beat it in isolation (the 8B shape's o and down projections at one row: 13.7
  // against 13.9 us, 42.7 against 44.8): with those two on the tensor cores dense decoding at
  // batch 1, 32K ran 1% slower end to end (7.26 against 7.19-7.22 ms, H100 2026-11-27,
  // bench/results/2026-11-27-h100-s23-pending/).
  //
  // Long inputs (the down projection's 14336) from two rows: on an H200 with weights never in L2
  // (bench/gemv_rows.cu, 2026-11-29) the 4096 x 14336 projection took 31.9 us on the tensor cores
  // against 36.3 on the FMA kernel at two rows (36.5 at one); in a step at two rows ncu counted
  // the FMA kernel's 37.1 us against its 30.2 at one row.
  const bool mma = n >= kGemvMmaMinRows || (n >= 2 && in >= kGemvMmaMinIn);
  return gemv_with(x, w, y, n, out, in, mma ? GemvKernel::kMma : GemvKernel::kFma, s);
}

bool gemv_with(const uint16_t* x, const uint16_t* w, float* y, int n, int out, int in, GemvKernel kind,
               cudaStream_t s) {
  if (n < 1 || n > kGemvMaxRows || in % 8 != 0) return false;
  if (kind == GemvKernel::kMma) {
    launch_mma(x, w, y, n, out, in, s);
    return true;
  }
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
