#include "backend/cuda/paged_prefill_attention.cuh"

#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>

namespace skim::cuda {

namespace {

using namespace nvcuda;

constexpr int kTile = 16;   // rows per CTA, keys per page, WMMA's M, N and K
constexpr int kMaxWarps = 8;

// Shared memory: the current K and V page, then one block per warp (query head).
template <int D>
struct Smem {
  static constexpr int kPage = kTile * D * 2;                 // bf16 bytes of one K or V page
  static constexpr int kQ = kTile * D * 2;                    // bf16 query tile
  static constexpr int kS = kTile * kTile * 4;                // fp32 scores
  static constexpr int kP = kTile * kTile * 2;                // bf16 probabilities
  static constexpr int kO = kTile * D * 4;                    // fp32 output accumulator
  static constexpr int kStats = 3 * kTile * 4 + 32;           // m, l, alpha (+ padding to 32 B)
  static constexpr int kWarp = kQ + kS + kP + kO + kStats;
  static int bytes(int warps) { return 2 * kPage + warps * kWarp; }
};

template <int D>
__global__ void prefill_kernel(PagedPrefillArgs a, int sub_groups) {
  using S = Smem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* kp = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* vp = reinterpret_cast<__nv_bfloat16*>(smem + S::kPage);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* mine = smem + 2 * S::kPage + warp * S::kWarp;
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

  const int pages = last_pos / kTile + 1;
  for (int page = 0; page < pages; ++page) {
    const size_t base = (size_t(a.page_table[page]) * a.num_kv_heads + h) * kTile * D;
    const uint4* ksrc = reinterpret_cast<const uint4*>(a.k_pool + base);
    const uint4* vsrc = reinterpret_cast<const uint4*>(a.v_pool + base);
    for (int i = threadIdx.x; i < kTile * D / 8; i += blockDim.x) {
      reinterpret_cast<uint4*>(kp)[i] = ksrc[i];
      reinterpret_cast<uint4*>(vp)[i] = vsrc[i];
    }
    __syncthreads();
    if (active) {
      // Scores: S = Q K^T (K page row-major [key][dim] is K^T column-major).
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int k = 0; k < D; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, qs + k, D);
        wmma::load_matrix_sync(fb, kp + k, D);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(ss, acc, kTile, wmma::mem_row_major);
      __syncwarp();
      // Online softmax, one lane per row; keys after the row's position are masked.
      if (lane < kTile) {
        const int pos = lane < rows ? a.positions[r0 + lane] : -1;
        float x[kTile], mx = m[lane];
        for (int j = 0; j < kTile; ++j) {
          x[j] = page * kTile + j <= pos ? ss[lane * kTile + j] * scale_log2 : -INFINITY;
          mx = fmaxf(mx, x[j]);
        }
        float sum = 0.0f, f = 1.0f;
        if (mx != -INFINITY) {
          f = exp2f(m[lane] - mx);  // 0 when m was -inf
          for (int j = 0; j < kTile; ++j) {
            // The normaliser sums the bf16 weights P.V uses, so o stays a weighted mean.
            const __nv_bfloat16 p = __float2bfloat16(exp2f(x[j] - mx));
            sum += __bfloat162float(p);
            ps[lane * kTile + j] = p;
          }
          m[lane] = mx;
        } else {
          for (int j = 0; j < kTile; ++j) ps[lane * kTile + j] = __float2bfloat16(0.0f);
        }
        l[lane] = l[lane] * f + sum;
        alpha[lane] = f;
      }
      __syncwarp();
      for (int i = lane; i < kTile * D; i += 32) os[i] *= alpha[i / D];
      __syncwarp();
      // O += P V, one 16-column block of O at a time.
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fp;
      wmma::load_matrix_sync(fp, ps, kTile);
      for (int c = 0; c < D; c += 16) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fv;
        wmma::load_matrix_sync(acc, os + c, D, wmma::mem_row_major);
        wmma::load_matrix_sync(fv, vp + c, D);
        wmma::mma_sync(acc, fp, fv, acc);
        wmma::store_matrix_sync(os + c, acc, D, wmma::mem_row_major);
      }
      __syncwarp();
    }
    __syncthreads();  // the page buffers are refilled next
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
