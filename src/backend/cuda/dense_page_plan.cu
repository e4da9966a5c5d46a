// The dense page plan kernel (see dense_page_plan.cuh).
#include "backend/cuda/dense_page_plan.cuh"

namespace skim::cuda {

namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) dense_plan_kernel(const DensePagePlanArgs a) {
  const int kvh = blockIdx.x, b = blockIdx.y;
  if (!a.rows.has(b)) return;
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const int m = (len + a.page_size - 1) / a.page_size;
  const size_t list = size_t(b) * a.num_kv_heads + kvh;
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  int32_t* out = a.out_table + list * a.max_pages_per_seq;
  uint32_t* masks = a.out_masks ? a.out_masks + list * a.max_pages_per_seq : nullptr;
  for (int p = threadIdx.x; p < m; p += kThreads) {
    out[p] = table[p];
    if (masks) masks[p] = ~0u;
  }
  if (threadIdx.x == 0) a.out_lens[list] = len;
}

}  // namespace

cudaError_t dense_page_plan(const DensePagePlanArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.num_kv_heads <= 0 || a.page_size <= 0 || a.max_pages_per_seq <= 0)
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  dense_plan_kernel<<<dim3(a.num_kv_heads, a.batch), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace skim::cuda
