// Group page selection kernels (see group_page_select.cuh).
#include "backend/cuda/group_page_select.cuh"

#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>
#include <cstdint>
#include <type_traits>

namespace skim::cuda {

namespace {

constexpr int kScoreWarps = 8;
constexpr int kPagesPerScoreCta = 128;  // 16 per warp
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
// summed over the group's heads in the order the CPU reference sums them (so bit-equal). A
// warp scores kWarpPages pages at a time, all their digest loads in flight together.
constexpr int kWarpPages = kPagesPerScoreCta / kScoreWarps;
template <int D>
__global__ void __launch_bounds__(kScoreWarps * 32) score_kernel(const GroupPageSelectArgs a) {
  constexpr int V = D / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = blockIdx.y, b = blockIdx.z, group = a.group_size();
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const int m = pages_of(len, a.page_size);
  const int p0 = blockIdx.x * kPagesPerScoreCta + warp * kWarpPages;
  if (p0 >= m) return;
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  const int my_id = lane < kWarpPages && p0 + lane < m ? __ldg(table + p0 + lane) : 0;

  float q[V];
#pragma unroll
  for (int i = 0; i < V; ++i) q[i] = 0.0f;
  for (int g = 0; g < group; ++g) {
    const __nv_bfloat16* qh =
        reinterpret_cast<const __nv_bfloat16*>(a.q) + (size_t(b) * a.num_heads + size_t(kvh) * group + g) * D + lane * V;
#pragma unroll
    for (int i = 0; i < V; ++i) q[i] += __bfloat162float(qh[i]) / float(group);
  }

  // Every load of the warp's pages first (raw bf16 in registers: V/2 words per page and side),
  // then the arithmetic: the warp keeps 16 x 2 loads in flight.
  using Raw = std::conditional_t<V == 4, uint2, unsigned>;
  Raw lo[kWarpPages], hi[kWarpPages];
#pragma unroll
  for (int j = 0; j < kWarpPages; ++j) {
    const int id = __shfl_sync(0xffffffffu, my_id, j);
    const size_t off = (size_t(id) * a.num_kv_heads + kvh) * D + lane * V;
    lo[j] = hi[j] = Raw{};
    if (p0 + j < m) {
      lo[j] = __ldg(reinterpret_cast<const Raw*>(a.kmin + off));
      hi[j] = __ldg(reinterpret_cast<const Raw*>(a.kmax + off));
    }
  }
  float s[kWarpPages];
#pragma unroll
  for (int j = 0; j < kWarpPages; ++j) {
    const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&lo[j]);
    const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&hi[j]);
    s[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < V / 2; ++i) {
      const float2 mn = __bfloat1622float2(x[i]), mx = __bfloat1622float2(y[i]);
      s[j] += fmaxf(q[2 * i] * mn.x, q[2 * i] * mx.x);
      s[j] += fmaxf(q[2 * i + 1] * mn.y, q[2 * i + 1] * mx.y);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s[j] += __shfl_xor_sync(0xffffffffu, s[j], o);
  }
  uint32_t* keys = keys_of(a, b, kvh);
  const int forced_from = m - min(a.n_local, m);
  if (lane < kWarpPages && p0 + lane < m) {
    const int p = p0 + lane;
    float mine = s[0];
#pragma unroll
    for (int j = 1; j < kWarpPages; ++j)
      if (lane == j) mine = s[j];
    keys[p] = p == m - 1 ? kNewestKey : p >= forced_from ? kForcedKey : order_key(mine);
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

// Keys of up to this many pages are staged in shared memory (longer sequences read L2),
// at index p + p / 32 so that a thread's run of consecutive keys and a warp's stripe both
// spread over the banks.
constexpr int kSmemKeys = 10240;  // 160K tokens; static shared memory stays under 48 KB
constexpr int kItems = 16;        // consecutive pages per thread in the compaction
__device__ __forceinline__ int skew(int p) { return p + (p >> 5); }

// One CTA per (KV head, sequence): radix select of the n-th largest key, then the kept pages
// written in position order.
__global__ void __launch_bounds__(kSelectThreads) select_kernel(const GroupPageSelectArgs a) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ unsigned hist[256];
  __shared__ int s_bin;
  __shared__ unsigned s_above;
  __shared__ uint32_t s_keys[kSmemKeys + kSmemKeys / 32];

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
  const bool staged = m <= kSmemKeys;
  if (staged)
    for (int p = t; p < m; p += kSelectThreads) s_keys[skew(p)] = keys[p];
  auto key = [&](int p) { return staged ? s_keys[skew(p)] : keys[p]; };

  uint32_t prefix = 0, mask = 0;
  unsigned need = unsigned(n);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = t; i < 256; i += kSelectThreads) hist[i] = 0;
    __syncthreads();
    // Plain shared-memory atomics: warp-aggregated counting (__match_any_sync, or a loop over
    // the warp's distinct bins) was measured slower on the H100, 29 and 80 us against 17.
    for (int p = t; p < m; p += kSelectThreads) {
      const uint32_t k = key(p);
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

  // Each thread owns kItems consecutive pages of a tile, so thread order is position order.
  int eq_before = 0, written = 0;
  for (int base = 0; base < m; base += kSelectThreads * kItems) {
    const int p0 = base + t * kItems;
    uint32_t k[kItems];
    int eq = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      k[i] = p0 + i < m ? key(p0 + i) : 0u;
      eq += p0 + i < m && k[i] == threshold;
    }
    int eq_rank, eq_total;
    Scan(scan).ExclusiveSum(eq, eq_rank, eq_total);
    __syncthreads();
    unsigned keep_bits = 0;
    int rank = eq_before + eq_rank;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const bool in = p0 + i < m;
      const bool keep = in && (k[i] > threshold || (k[i] == threshold && rank++ < int(need)));
      keep_bits |= unsigned(keep) << i;
    }
    int pos, kept_total;
    Scan(scan).ExclusiveSum(__popc(keep_bits), pos, kept_total);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (keep_bits >> i & 1u) out[written + pos++] = table[p0 + i];
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
