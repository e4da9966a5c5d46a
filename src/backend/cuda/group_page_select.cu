// Group page selection kernels (see group_page_select.cuh).
#include "backend/cuda/group_page_select.cuh"

#include <cuda_bf16.h>

#include "backend/cuda/page_select_common.cuh"
#include <cstdint>
#include <type_traits>

namespace skim::cuda {

namespace {

using namespace page_select;

__device__ __forceinline__ uint32_t* keys_of(const GroupPageSelectArgs& a, int b, int kvh) {
  return static_cast<uint32_t*>(a.workspace) + (size_t(b) * a.num_kv_heads + kvh) * a.max_pages_per_seq;
}

// Grid (page blocks, KV heads, batch): a warp scores kWarpPages pages for the group's
// pooled query (page_select_common.cuh), then the forced pages get keys above every bound.
template <int D>
__global__ void __launch_bounds__(kScoreWarps * 32) score_kernel(const GroupPageSelectArgs a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = blockIdx.y, b = blockIdx.z, group = a.group_size();
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const int m = pages_of(len, a.page_size);
  const int p0 = blockIdx.x * kPagesPerScoreCta + warp * kWarpPages;
  if (p0 >= m || !a.rows.has(b)) return;
  const float s = warp_page_bounds<D>(a.q + (size_t(b) * a.num_heads + size_t(kvh) * group) * D, group, a.kmin,
                                      a.kmax, a.num_kv_heads, kvh, a.page_table + size_t(b) * a.max_pages_per_seq,
                                      p0, m, lane);
  uint32_t* keys = keys_of(a, b, kvh);
  const int forced_from = m - min(a.n_local, m);
  if (lane < kWarpPages && p0 + lane < m) {
    const int p = p0 + lane;
    keys[p] = p == m - 1 ? kNewestKey : p >= forced_from ? kForcedKey : order_key(s);
  }
}

__global__ void __launch_bounds__(kThreads) select_kernel(const GroupPageSelectArgs a) {
  __shared__ SelectSmem sm;
  const int kvh = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
  if (!a.rows.has(b)) return;
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const int m = pages_of(len, a.page_size), n = a.pages_kept(m);
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  const size_t list = size_t(b) * a.num_kv_heads + kvh;
  int32_t* out = a.out_table + list * a.max_pages_per_seq;
  uint32_t* masks = a.out_masks ? a.out_masks + list * a.max_pages_per_seq : nullptr;
  if (t == 0) a.out_lens[list] = m == 0 ? 0 : (n - 1) * a.page_size + (len - (m - 1) * a.page_size);
  const auto keep = [&](int p, int rank) {
    out[rank] = table[p];
    if (masks) masks[rank] = ~0u;  // every head of the group attends the group's pages
  };
  if (n == m) {  // every page kept (short sequences)
    for (int p = t; p < m; p += kThreads) keep(p, p);
    return;
  }
  select_top_pages(sm, keys_of(a, b, kvh), m, n, keep, [](int) {});
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
  const cudaError_t e = launch_scores(score_kernel<64>, score_kernel<128>, a, a.num_kv_heads, stream);
  if (e != cudaSuccess) return e;
  select_kernel<<<dim3(a.num_kv_heads, a.batch), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace skim::cuda
