#include "backend/cuda/paged_prefill_attention.cuh"

#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>

namespace skim::cuda {

namespace {

using namespace nvcuda;

constexpr int kTile = 16;        // rows per CTA, keys per page; WMMA's M, N and K
constexpr int kBlockPages = 4;   // pages per step of the key loop
constexpr int kKeys = kBlockPages * kTile;
constexpr int kMaxWarps = 8;

// Shared memory: the current block of K and V pages, then one area per warp (query head).
template <int D>
struct Smem {
  static constexpr int kKV = kKeys * D * 2;        // bf16 bytes of a block of K (or V)
  static constexpr int kQ = kTile * D * 2;         // bf16 query tile
  static constexpr int kS = kTile * kKeys * 4;     // fp32 scores
  static constexpr int kP = kTile * kKeys * 2;     // bf16 probabilities
  static constexpr int kO = kTile * D * 4;         // fp32 output accumulator
  static constexpr int kStats = 3 * kTile * 4 + 32;  // m, l, alpha (+ padding to 32 B)
  static constexpr int kWarp = kQ + kS + kP + kO + kStats;
  static int bytes(int warps) { return 2 * kKV + warps * kWarp; }
};

template <int D>
__global__ void prefill_kernel(PagedPrefillArgs a, int sub_groups) {
  using S = Smem<D>;
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
  using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* kb = reinterpret_cast<__nv_bfloat16*>(smem);  // [kKeys][D]
  __nv_bfloat16* vb = reinterpret_cast<__nv_bfloat16*>(smem + S::kKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* mine = smem + 2 * S::kKV + warp * S::kWarp;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(mine);
  float* ss = reinterpret_cast<float*>(mine + S::kQ);
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(mine + S::kQ + S::kS);
  float* os = reinterpret_cast<float*>(mine + S::kQ + S::kS + S::kP);
  float* m = reinterpret_cast<float*>(mine + S::kQ + S::kS + S::kP + S::kO);
  float* l = m + kTile;
  float* alpha = l + kTile;

  const int group = a.num_heads / a.num_kv_heads;
  const int h = blockIdx.y / sub_groups, sub = blockIdx.y % sub_groups;
  const int head_in_group = sub * kMaxWarps + warp;
  const bool active = head_in_group < group;
  const int hq = h * group + head_in_group;
  const int r0 = blockIdx.x * kTile;
  const int rows = min(kTile, a.n - r0);
  const int last_pos = a.positions[r0 + rows - 1];  // rows are consecutive positions
  const float scale_log2 = a.scale * 1.4426950408889634f;

  if (active) {
    for (int i = lane; i < kTile * D; i += 32) {
      const int r = i / D, c = i % D;
      qs[i] = r < rows ? __ushort_as_bfloat16(a.q[(size_t(r0 + r) * a.num_heads + hq) * D + c])
                       : __float2bfloat16(0.0f);
      os[i] = 0.0f;
    }
    if (lane < kTile) m[lane] = -INFINITY, l[lane] = 0.0f;
  }
  __syncwarp();

  // Two lanes per row in the softmax: lane 2r + half takes keys [32 half, 32 half + 32).
  const int row = lane / 2, half = lane % 2;
  const int row_pos = row < rows ? a.positions[r0 + row] : -1;
  const int pages = last_pos / kTile + 1;
  for (int first = 0; first < pages; first += kBlockPages) {
    const int in_block = min(kBlockPages, pages - first);
    for (int i = threadIdx.x; i < kBlockPages * kTile * D / 8; i += blockDim.x) {
      const int pg = i / (kTile * D / 8), off = i % (kTile * D / 8);
      uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;  // pages past the sequence: zeros, masked below
      if (pg < in_block) {
        const size_t base = (size_t(a.page_table[first + pg]) * a.num_kv_heads + h) * kTile * D;
        kv = reinterpret_cast<const uint4*>(a.k_pool + base)[off];
        vv = reinterpret_cast<const uint4*>(a.v_pool + base)[off];
      }
      reinterpret_cast<uint4*>(kb)[i] = kv;
      reinterpret_cast<uint4*>(vb)[i] = vv;
    }
    __syncthreads();
    if (active) {
      // Scores S = Q K^T, one 16-key tile at a time (K rows [key][dim] are K^T column-major).
      for (int kt = 0; kt < kBlockPages; ++kt) {
        FragAcc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < D; k += 16) {
          FragA fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
          wmma::load_matrix_sync(fa, qs + k, D);
          wmma::load_matrix_sync(fb, kb + kt * kTile * D + k, D);
          wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(ss + kt * kTile, acc, kKeys, wmma::mem_row_major);
      }
      __syncwarp();
      // Online softmax; keys after the row's position are masked.
      const int key0 = first * kTile + half * 32;
      float x[32], mx = m[row];
      for (int j = 0; j < 32; ++j) {
        x[j] = key0 + j <= row_pos ? ss[row * kKeys + half * 32 + j] * scale_log2 : -INFINITY;
        mx = fmaxf(mx, x[j]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      float sum = 0.0f, f = 1.0f;
      if (mx != -INFINITY) {
        f = exp2f(m[row] - mx);  // 0 when m was -inf
        for (int j = 0; j < 32; ++j) {
          // The normaliser sums the bf16 weights P.V uses, so o stays a weighted mean.
          const __nv_bfloat16 p = __float2bfloat16(exp2f(x[j] - mx));
          sum += __bfloat162float(p);
          ps[row * kKeys + half * 32 + j] = p;
        }
      } else {
        for (int j = 0; j < 32; ++j) ps[row * kKeys + half * 32 + j] = __float2bfloat16(0.0f);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      __syncwarp();
      if (half == 0) {
        if (mx != -INFINITY) m[row] = mx;
        l[row] = l[row] * f + sum;
        alpha[row] = f;
      }
      __syncwarp();
      for (int i = lane; i < kTile * D; i += 32) os[i] *= alpha[i / D];
      __syncwarp();
      // O += P V, one 16-column block of O at a time.
      FragA fp[kBlockPages];
      for (int kt = 0; kt < kBlockPages; ++kt) wmma::load_matrix_sync(fp[kt], ps + kt * kTile, kKeys);
      for (int c = 0; c < D; c += 16) {
        FragAcc acc;
        wmma::load_matrix_sync(acc, os + c, D, wmma::mem_row_major);
        for (int kt = 0; kt < kBlockPages; ++kt) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fv;
          wmma::load_matrix_sync(fv, vb + kt * kTile * D + c, D);
          wmma::mma_sync(acc, fp[kt], fv, acc);
        }
        wmma::store_matrix_sync(os + c, acc, D, wmma::mem_row_major);
      }
      __syncwarp();
    }
    __syncthreads();  // the block's buffers are refilled next
  }

  if (!active) return;
  for (int i = lane; i < rows * D; i += 32) {
    const int r = i / D;
    a.o[(size_t(r0 + r) * a.num_heads + hq) * D + i % D] = l[r] > 0.0f ? os[i] / l[r] : 0.0f;
  }
  if (lane < rows)
    a.lse[size_t(r0 + lane) * a.num_heads + hq] = l[lane] > 0.0f ? (m[lane] + log2f(l[lane])) * 0.6931471805599453f
                                                                 : -INFINITY;
}

template <int D>
cudaError_t launch(const PagedPrefillArgs& a, cudaStream_t stream) {
  const int group = a.num_heads / a.num_kv_heads;
  const int warps = std::min(group, kMaxWarps), sub_groups = (group + kMaxWarps - 1) / kMaxWarps;
  const int smem = Smem<D>::bytes(warps);
  static int configured = 0;  // largest size the attribute allows so far
  if (smem > configured) {
    const int all = Smem<D>::bytes(kMaxWarps);
    cudaError_t e = cudaFuncSetAttribute(prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, all);
    if (e != cudaSuccess) return e;
    configured = all;
  }
  const dim3 grid((a.n + kTile - 1) / kTile, a.num_kv_heads * sub_groups);
  prefill_kernel<D><<<grid, warps * 32, smem, stream>>>(a, sub_groups);
  return cudaGetLastError();
}

}  // namespace

cudaError_t paged_prefill_attention(const PagedPrefillArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      (a.head_dim != 64 && a.head_dim != 128) || a.page_size != kTile)
    return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  return a.head_dim == 64 ? launch<64>(a, stream) : launch<128>(a, stream);
}

}  // namespace skim::cuda
