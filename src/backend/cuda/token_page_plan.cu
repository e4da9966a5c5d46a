// token_page_plan on the GPU (see token_page_plan.cuh).
#include "backend/cuda/token_page_plan.cuh"

#include <cub/block/block_scan.cuh>

#include "backend/cuda/pdl.cuh"

namespace skim::cuda {

namespace {

constexpr int kThreads = 256, kItems = 4;  // a tile: kItems consecutive positions a thread

__global__ void __launch_bounds__(kThreads) plan_kernel(const TokenPagePlanArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int i = blockIdx.x, ps = a.page_size, len = min(max(a.token_lens[i], 0), a.max_tokens);
  const int32_t* list = a.token_lists + size_t(i) * a.max_tokens;
  const int32_t* pages = a.page_table + size_t(i / a.lists_per_row) * a.max_pages;
  int32_t* plan = a.plan_table + size_t(i) * a.max_pages;
  int32_t* tokens = a.plan_tokens + size_t(i) * a.max_tokens;
  int opened = 0;  // pages numbered by the tiles before
  for (int base = 0; base < len; base += kThreads * kItems) {
    const int j0 = base + threadIdx.x * kItems;
    int pos[kItems], page[kItems], opens = 0;
    int prev = j0 > 0 && j0 <= len ? list[j0 - 1] / ps : -1;  // the position before this thread's first
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      pos[k] = j0 + k < len ? list[j0 + k] : -1;
      page[k] = pos[k] / ps;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k)
      if (j0 + k < len) {
        opens += page[k] != prev;
        prev = page[k];
      }
    int number, total;
    Scan(scan).ExclusiveSum(opens, number, total);
    number += opened;  // this thread's first opened page's number
    prev = j0 > 0 && j0 <= len ? list[j0 - 1] / ps : -1;
#pragma unroll
    for (int k = 0; k < kItems; ++k)
      if (j0 + k < len) {
        if (page[k] != prev) plan[number++] = pages[page[k]];
        tokens[j0 + k] = (number - 1) * ps + pos[k] % ps;
        prev = page[k];
      }
    opened += total;
    __syncthreads();  // the scan storage is rewritten next tile
  }
  if (threadIdx.x == 0) a.plan_lens[i] = opened * ps;
}

}  // namespace

cudaError_t token_page_plan(const TokenPagePlanArgs& a, cudaStream_t stream) {
  if (a.lists < 0 || a.lists_per_row <= 0 || a.page_size <= 0 || a.max_pages < 0 || a.max_tokens < 0)
    return cudaErrorInvalidValue;
  if (a.lists == 0) return cudaSuccess;
  (void)launch_pdl(plan_kernel, a.lists, kThreads, 0, stream, a);
  return cudaGetLastError();
}

}  // namespace skim::cuda
