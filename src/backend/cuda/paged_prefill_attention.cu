#include "backend/cuda/paged_prefill_attention.cuh"

#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>

#include "backend/cuda/paged_decode_attention_impl.cuh"  // merge_kernel, device_info

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

// Split of the key range: CTA z of a row tile takes key blocks [z * blocks_per_split, ...).
// With splits > 1 each CTA writes its rows' normalised partial o and lse to part_o
// [n][num_heads][splits][D] and part_lse [n][num_heads][splits] (merge_kernel's layout, the
// rows as its batch); rows whose position precedes the CTA's keys write (0, -inf).
struct Split {
  int splits = 1;
  int blocks_per_split = 1 << 24;  // x kBlockPages pages: no overflow
  float* part_o = nullptr;
  float* part_lse = nullptr;
};

template <int D>
__global__ void prefill_kernel(PagedPrefillArgs a, int sub_groups, Split sp) {
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
  const int begin = blockIdx.z * sp.blocks_per_split * kBlockPages;
  const int end = min(pages, begin + sp.blocks_per_split * kBlockPages);
  for (int first = begin; first < end; first += kBlockPages) {
    const int in_block = min(kBlockPages, end - first);
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
  // Final outputs, or this split's partials (one more stride level: the split).
  const int z = blockIdx.z, ns = sp.splits;
  float* o = ns > 1 ? sp.part_o : a.o;
  float* lse = ns > 1 ? sp.part_lse : a.lse;
  for (int i = lane; i < rows * D; i += 32) {
    const int r = i / D;
    o[((size_t(r0 + r) * a.num_heads + hq) * ns + z) * D + i % D] = l[r] > 0.0f ? os[i] / l[r] : 0.0f;
  }
  if (lane < rows)
    lse[(size_t(r0 + lane) * a.num_heads + hq) * ns + z] =
        l[lane] > 0.0f ? (m[lane] + log2f(l[lane])) * 0.6931471805599453f : -INFINITY;
}

// Key splits per row tile, only when the row tiles alone leave SMs idle: then enough CTAs
// for two per SM, each split at least kMinSplitBlocks blocks of keys, at most kMaxSplits.
constexpr int kMaxSplits = 64;
constexpr int kMinSplitBlocks = 4;
struct SplitPlan {
  int splits = 1, blocks_per_split = 1 << 24;
};
SplitPlan plan_splits(int n, int units, int max_position, int sms) {
  SplitPlan p;
  const int tiles = (n + kTile - 1) / kTile;
  const int blocks = (max_position / kTile + 1 + kBlockPages - 1) / kBlockPages;
  const long ctas = long(tiles) * units;
  if (ctas >= sms) return p;
  int s = int(std::min<long>((2L * sms + ctas - 1) / ctas, kMaxSplits));
  s = std::min(s, std::max(1, blocks / kMinSplitBlocks));
  if (s <= 1) return p;
  p.blocks_per_split = (blocks + s - 1) / s;
  p.splits = (blocks + p.blocks_per_split - 1) / p.blocks_per_split;
  return p;
}

size_t split_bytes(int n, int num_heads, int head_dim, int splits) {
  const size_t heads = size_t(n) * num_heads * splits;
  return detail::align_up(heads * head_dim * 4, 256) + detail::align_up(heads * 4, 256);
}

int sm_count() {
  detail::DeviceInfo info;
  return detail::device_info(info) == cudaSuccess ? info.sms : 132;
}

template <int D>
cudaError_t launch(const PagedPrefillArgs& a, cudaStream_t stream) {
  const int group = a.num_heads / a.num_kv_heads;
  const int warps = std::min(group, kMaxWarps), sub_groups = (group + kMaxWarps - 1) / kMaxWarps;
  const int smem = Smem<D>::bytes(warps);
  // The attribute is per device (tensor parallelism launches on several): the largest size it
  // allows so far on each. A benign race: every writer of a device's entry stores the same value.
  constexpr int kMaxDevices = 64;
  static int configured[kMaxDevices] = {};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (dev >= kMaxDevices || smem > configured[dev]) {
    const int all = Smem<D>::bytes(kMaxWarps);
    cudaError_t e = cudaFuncSetAttribute(prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, all);
    if (e != cudaSuccess) return e;
    if (dev < kMaxDevices) configured[dev] = all;
  }
  const int units = a.num_kv_heads * sub_groups;
  const SplitPlan plan = a.workspace ? plan_splits(a.n, units, a.max_position, sm_count()) : SplitPlan{};
  Split sp;
  if (plan.splits > 1 && a.workspace_bytes >= split_bytes(a.n, a.num_heads, D, plan.splits)) {
    sp.splits = plan.splits;
    sp.blocks_per_split = plan.blocks_per_split;
    sp.part_o = static_cast<float*>(a.workspace);
    sp.part_lse = reinterpret_cast<float*>(static_cast<char*>(a.workspace) +
                                           detail::align_up(size_t(a.n) * a.num_heads * sp.splits * D * 4, 256));
  }
  const dim3 grid((a.n + kTile - 1) / kTile, units, sp.splits);
  prefill_kernel<D><<<grid, warps * 32, smem, stream>>>(a, sub_groups, sp);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || sp.splits == 1) return e;
  detail::MergeParams mp;
  mp.part_o = sp.part_o;
  mp.part_lse = sp.part_lse;
  mp.o = a.o;
  mp.lse = a.lse;
  mp.num_heads = a.num_heads;
  mp.num_chunks = sp.splits;
  detail::merge_kernel<D><<<a.n * a.num_heads, detail::kMergeThreads, 0, stream>>>(mp);
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

size_t paged_prefill_workspace_size(int max_rows, int num_heads, int num_kv_heads, int head_dim, int max_position) {
  if (max_rows <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads) return 0;
  const int group = num_heads / num_kv_heads;
  const int units = num_kv_heads * ((group + kMaxWarps - 1) / kMaxWarps);
  const int sms = sm_count();
  size_t bytes = 0;
  for (int n = 1; n <= max_rows; ++n) {
    const SplitPlan p = plan_splits(n, units, max_position, sms);
    if (p.splits > 1) bytes = std::max(bytes, split_bytes(n, num_heads, head_dim, p.splits));
  }
  return bytes;
}

}  // namespace skim::cuda
