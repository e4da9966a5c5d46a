// The window page plan kernel (see window_page_plan.cuh).
#include "backend/cuda/window_page_plan.cuh"

#include "backend/cuda/pdl.cuh"

namespace skim::cuda {

namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) window_plan_kernel(const WindowPagePlanArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  const int kvh = blockIdx.x, b = blockIdx.y;
  if (!a.rows.has(b)) return;
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
  const WindowPages w = window_pages(len, a.page_size, a.sink, a.window);
  const size_t list = size_t(b) * a.num_kv_heads + kvh;
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  int32_t* out = a.out_table + list * a.max_pages_per_seq;
  uint32_t* masks = a.out_masks ? a.out_masks + list * a.max_pages_per_seq : nullptr;
  for (int i = threadIdx.x; i < w.count(); i += kThreads) {
    out[i] = table[a.recent_first ? w.page_recent_first(i) : w.page(i)];
    if (masks) masks[i] = ~0u;
  }
  if (threadIdx.x == 0) a.out_lens[list] = w.m == 0 ? 0 : (w.count() - 1) * a.page_size + len - (w.m - 1) * a.page_size;
}

}  // namespace

cudaError_t window_page_plan(const WindowPagePlanArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.num_kv_heads <= 0 || a.page_size <= 0 || a.max_pages_per_seq <= 0 || a.sink < 0 ||
      a.window < 0)
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  (void)launch_pdl(window_plan_kernel, dim3(a.num_kv_heads, a.batch), kThreads, 0, stream, a);
  return cudaGetLastError();
}

}  // namespace skim::cuda
