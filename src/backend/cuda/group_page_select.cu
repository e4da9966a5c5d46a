// Group page selection kernels (see group_page_select.cuh).
#include "backend/cuda/group_page_select.cuh"

#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>
#include <cstdint>

namespace skim::cuda {

namespace {

constexpr int kScoreWarps = 8;
constexpr int kPagesPerScoreCta = 64;  // 8 per warp
constexpr int kSelectThreads = 512;
constexpr uint32_t kForcedKey = 0xFF800000u;  // key of +inf: above every finite bound
constexpr uint32_t kNewestKey = 0xFFFFFFFFu;  // the newest page: above the forced ones

// Monotone map of a (non-NaN) float to uint32: a > b exactly when key(a) > key(b).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t bits = __float_as_uint(f);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

__device__ __forceinline__ int pages_of(int len, int page_size) { return (len + page_size - 1) / page_size; }

__device__ __forceinline__ uint32_t* keys_of(const GroupPageSelectArgs& a, int b, int kvh) {
  return static_cast<uint32_t*>(a.workspace) + (size_t(b) * a.num_kv_heads + kvh) * a.max_pages_per_seq;
}

// Grid (page blocks, KV heads, batch). Lane l holds dims [l*V, l*V+V) of the pooled query,
// summed over the group's heads in the order the CPU reference sums them (so bit-equal).
template <int D>
__global__ void __launch_bounds__(kScoreWarps * 32) score_kernel(const GroupPageSelectArgs a) {
  constexpr int V = D / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = blockIdx.y, b = blockIdx.z, group = a.group_size();
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const int m = pages_of(len, a.page_size);
  const int p0 = blockIdx.x * kPagesPerScoreCta;
  if (p0 >= m) return;

  float q[V];
#pragma unroll
  for (int i = 0; i < V; ++i) q[i] = 0.0f;
  for (int g = 0; g < group; ++g) {
    const __nv_bfloat16* qh =
        reinterpret_cast<const __nv_bfloat16*>(a.q) + (size_t(b) * a.num_heads + size_t(kvh) * group + g) * D + lane * V;
#pragma unroll
    for (int i = 0; i < V; ++i) q[i] += __bfloat162float(qh[i]) / float(group);
  }

  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  uint32_t* keys = keys_of(a, b, kvh);
  const int forced_from = m - min(a.n_local, m);
  for (int p = p0 + warp; p < min(p0 + kPagesPerScoreCta, m); p += kScoreWarps) {
    if (p >= forced_from || p == m - 1) {
      if (lane == 0) keys[p] = p == m - 1 ? kNewestKey : kForcedKey;
      continue;
    }
    const size_t off = (size_t(__ldg(table + p)) * a.num_kv_heads + kvh) * D + lane * V;
    float mn[V], mx[V];
    if constexpr (V == 4) {
      const float4 x = __ldg(reinterpret_cast<const float4*>(a.kmin + off));
      const float4 y = __ldg(reinterpret_cast<const float4*>(a.kmax + off));
      mn[0] = x.x, mn[1] = x.y, mn[2] = x.z, mn[3] = x.w;
      mx[0] = y.x, mx[1] = y.y, mx[2] = y.z, mx[3] = y.w;
    } else {
      const float2 x = __ldg(reinterpret_cast<const float2*>(a.kmin + off));
      const float2 y = __ldg(reinterpret_cast<const float2*>(a.kmax + off));
      mn[0] = x.x, mn[1] = x.y;
      mx[0] = y.x, mx[1] = y.y;
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) s += fmaxf(q[i] * mn[i], q[i] * mx[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) keys[p] = order_key(s);
  }
}

// Warp 0 finds the bin (scanning from the top) where the count of keys reaches `need`:
// returns it through *bin and the count of keys in higher bins through *above.
__device__ void find_bin(const unsigned* hist, unsigned need, int* bin, unsigned* above) {
  const int lane = threadIdx.x & 31;
  unsigned c[8], sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += (c[j] = hist[255 - 8 * lane - j]);  // lane 0: bins 255..248
  unsigned incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  const unsigned excl = incl - sum;
  const unsigned hit = __ballot_sync(0xffffffffu, incl >= need);
  if (lane == __ffs(hit) - 1) {
    unsigned cum = excl;
    for (int j = 0; j < 8; ++j) {
      if (cum + c[j] >= need) {
        *bin = 255 - 8 * lane - j;
        *above = cum;
        break;
      }
      cum += c[j];
    }
  }
}

// One CTA per (KV head, sequence): radix select of the n-th largest key, then the kept pages
// written in position order.
__global__ void __launch_bounds__(kSelectThreads) select_kernel(const GroupPageSelectArgs a) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ unsigned hist[256];
  __shared__ int s_bin;
  __shared__ unsigned s_above;

  const int kvh = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const int m = pages_of(len, a.page_size), n = a.pages_kept(m);
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  const size_t list = size_t(b) * a.num_kv_heads + kvh;
  int32_t* out = a.out_table + list * a.max_pages_per_seq;
  if (t == 0) a.out_lens[list] = m == 0 ? 0 : (n - 1) * a.page_size + (len - (m - 1) * a.page_size);
  if (n == m) {  // every page kept (short sequences)
    for (int p = t; p < m; p += kSelectThreads) out[p] = table[p];
    return;
  }
  const uint32_t* keys = keys_of(a, b, kvh);

  uint32_t prefix = 0, mask = 0;
  unsigned need = unsigned(n);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = t; i < 256; i += kSelectThreads) hist[i] = 0;
    __syncthreads();
    for (int p = t; p < m; p += kSelectThreads) {
      const uint32_t k = keys[p];
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (t < 32) find_bin(hist, need, &s_bin, &s_above);
    __syncthreads();
    prefix |= uint32_t(s_bin) << shift;
    mask |= 255u << shift;
    need -= s_above;
    __syncthreads();  // hist and s_bin are rewritten next pass
  }
  const uint32_t threshold = prefix;  // the n-th largest key; `need` of its equals are kept

  int eq_before = 0, written = 0;
  for (int base = 0; base < m; base += kSelectThreads) {
    const int p = base + t;
    const uint32_t k = p < m ? keys[p] : 0u;
    const int is_eq = p < m && k == threshold;
    int eq_rank, eq_total;
    Scan(scan).ExclusiveSum(is_eq, eq_rank, eq_total);
    __syncthreads();
    const int keep = (p < m && k > threshold) || (is_eq && eq_before + eq_rank < int(need));
    int pos, kept_total;
    Scan(scan).ExclusiveSum(keep, pos, kept_total);
    __syncthreads();
    if (keep) out[written + pos] = table[p];
    eq_before += eq_total;
    written += kept_total;
  }
}

bool supported(const GroupPageSelectArgs& a) {
  return a.batch >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
         (a.head_dim == 64 || a.head_dim == 128) && a.page_size > 0 && a.max_pages_per_seq > 0 && a.n_min >= 1 &&
         a.n_local >= 0 && a.keep > 0 && a.keep <= 1;
}

}  // namespace

size_t group_page_select_workspace_size(const GroupPageSelectArgs& a) {
  return supported(a) ? size_t(a.batch) * a.num_kv_heads * a.max_pages_per_seq * sizeof(uint32_t) : 0;
}

cudaError_t group_page_select(const GroupPageSelectArgs& a, cudaStream_t stream) {
  if (!supported(a) || a.workspace == nullptr || a.workspace_bytes < group_page_select_workspace_size(a))
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  const dim3 score_grid((a.max_pages_per_seq + kPagesPerScoreCta - 1) / kPagesPerScoreCta, a.num_kv_heads, a.batch);
  if (a.head_dim == 128)
    score_kernel<128><<<score_grid, kScoreWarps * 32, 0, stream>>>(a);
  else
    score_kernel<64><<<score_grid, kScoreWarps * 32, 0, stream>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  select_kernel<<<dim3(a.num_kv_heads, a.batch), kSelectThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace skim::cuda
