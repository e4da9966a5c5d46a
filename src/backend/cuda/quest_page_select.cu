// Quest's page selection kernels (see quest_page_select.cuh).
#include "backend/cuda/quest_page_select.cuh"

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "backend/cuda/page_select_common.cuh"

namespace skim::cuda {

namespace {

using namespace page_select;

// Workspace: keys [batch][num_heads][max_pages_per_seq], then flags of the same shape.
__device__ __forceinline__ size_t head_row(const QuestPageSelectArgs& a, int b, int hq) {
  return (size_t(b) * a.num_heads + hq) * a.max_pages_per_seq;
}
__device__ __forceinline__ uint32_t* keys_of(const QuestPageSelectArgs& a, int b, int hq) {
  return static_cast<uint32_t*>(a.workspace) + head_row(a, b, hq);
}
__device__ __forceinline__ uint8_t* flags_of(const QuestPageSelectArgs& a, int b, int hq) {
  const size_t keys = size_t(a.batch) * a.num_heads * a.max_pages_per_seq;
  return reinterpret_cast<uint8_t*>(static_cast<uint32_t*>(a.workspace) + keys) + head_row(a, b, hq);
}

__device__ __forceinline__ int context_of(const QuestPageSelectArgs& a, int b) {
  return min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
}

// Grid (page blocks, KV heads, batch): a warp loads kWarpPages pages' digests once and scores
// them for each query head of the group.
template <int D>
__global__ void __launch_bounds__(kScoreWarps * 32) score_kernel(const QuestPageSelectArgs a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = blockIdx.y, b = blockIdx.z, group = a.group_size();
  const int m = pages_of(context_of(a, b), a.page_size);
  const int p0 = blockIdx.x * kPagesPerScoreCta + warp * kWarpPages;
  if (p0 >= m || !a.rows.has(b)) return;
  WarpDigests<D> dig;
  dig.load(a.kmin, a.kmax, a.num_kv_heads, kvh, a.page_table + size_t(b) * a.max_pages_per_seq, p0, m, lane);
  for (int g = 0; g < group; ++g) {
    const int hq = kvh * group + g;
    float qv[D / 32];
    load_query<D>(a.q + (size_t(b) * a.num_heads + hq) * D, 1, lane, qv);
    const float s = dig.bounds(qv, lane);
    if (lane < kWarpPages && p0 + lane < m) {
      const int p = p0 + lane;
      keys_of(a, b, hq)[p] = p == m - 1 ? kNewestKey : order_key(s);
    }
  }
}

// One CTA per (query head, sequence): its n best pages flagged 1, the others 0.
__global__ void __launch_bounds__(kThreads) select_kernel(const QuestPageSelectArgs a) {
  __shared__ SelectSmem sm;
  const int hq = blockIdx.x, b = blockIdx.y;
  if (!a.rows.has(b)) return;
  const int ctx = context_of(a, b), m = pages_of(ctx, a.page_size);
  const int n = min(m, quest_pages_kept(a.budget, a.min_tokens, ctx, a.page_size));
  uint8_t* flags = flags_of(a, b, hq);
  if (n == m) {  // every page kept (short sequences)
    for (int p = threadIdx.x; p < m; p += kThreads) flags[p] = 1;
    return;
  }
  select_top_pages(sm, keys_of(a, b, hq), m, n, [&](int p, int) { flags[p] = 1; }, [&](int p) { flags[p] = 0; });
}

// One CTA per (KV head, sequence): per page the mask of the group's heads that keep it; the
// pages some head keeps listed in position order with their masks.
__global__ void __launch_bounds__(kThreads) union_kernel(const QuestPageSelectArgs a) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int kvh = blockIdx.x, b = blockIdx.y, t = threadIdx.x, group = a.group_size();
  if (!a.rows.has(b)) return;
  const int ctx = context_of(a, b), m = pages_of(ctx, a.page_size);
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  const size_t list = (size_t(b) * a.num_kv_heads + kvh) * a.max_pages_per_seq;
  int written = 0;
  for (int base = 0; base < m; base += kThreads * kItems) {
    const int p0 = base + t * kItems;
    uint32_t mask[kItems];
    int listed = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      mask[i] = 0u;
      if (p0 + i < m)
        for (int g = 0; g < group; ++g) mask[i] |= uint32_t(flags_of(a, b, kvh * group + g)[p0 + i]) << g;
      listed += mask[i] != 0u;
    }
    int pos, total;
    Scan(scan).ExclusiveSum(listed, pos, total);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (mask[i]) {
        a.out_table[list + written + pos] = table[p0 + i];
        a.out_masks[list + written + pos] = mask[i];
        ++pos;
      }
    written += total;
  }
  if (t == 0) {
    const int tokens = m == 0 ? 0 : (written - 1) * a.page_size + ctx - (m - 1) * a.page_size;
    a.out_lens[size_t(b) * a.num_kv_heads + kvh] = tokens;
    if (a.listed_tokens) atomicAdd(a.listed_tokens, (unsigned long long)tokens);
  }
}

bool supported(const QuestPageSelectArgs& a) {
  return a.batch >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
         a.group_size() <= 32 && (a.head_dim == 64 || a.head_dim == 128) && a.page_size > 0 &&
         a.max_pages_per_seq > 0 && a.budget > 0 && a.min_tokens >= 0;
}

}  // namespace

size_t quest_page_select_workspace_size(const QuestPageSelectArgs& a) {
  return supported(a) ? size_t(a.batch) * a.num_heads * a.max_pages_per_seq * (sizeof(uint32_t) + 1) : 0;
}

cudaError_t quest_page_select(const QuestPageSelectArgs& a, cudaStream_t stream) {
  if (!supported(a) || a.workspace == nullptr || a.workspace_bytes < quest_page_select_workspace_size(a))
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  cudaError_t e = launch_scores(score_kernel<64>, score_kernel<128>, a, a.num_kv_heads, stream);
  if (e != cudaSuccess) return e;
  select_kernel<<<dim3(a.num_heads, a.batch), kThreads, 0, stream>>>(a);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  union_kernel<<<dim3(a.num_kv_heads, a.batch), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace skim::cuda
