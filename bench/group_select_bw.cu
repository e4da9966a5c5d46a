// gbsa's group page selection alone on the 8B shape (32 q / 8 KV heads of 128, 16-token pages,
// each sequence's pages in order, keep 0.1, n_min 16): the score kernel, the select kernel
// plain and by score (ART's order: the CTA sorts its list), and the whole selection. Each row is
// the mean of 50 back-to-back launches; "empty kernel" is a launch of the select's grid doing
// nothing, the floor under the select rows. Standalone (or against another revision's tree,
// -Ibuild-legacy/tree/src -Ibuild-legacy/tree/include):
//   nvcc -O3 -arch=sm_90a -std=c++20 -Isrc -Iinclude bench/group_select_bw.cu -o group_select_bw
#include <cstdio>

#include "backend/cuda/group_page_select.cu"
#include "backend/cuda/segment_sort.cu"
#include "kernel_timing.cuh"

namespace skim::cuda::group_select_bw {

using namespace page_select;
using bench::time_us;

void run_shape(int batch, int context) {
  const bench::SelectionBuffers in(batch, context);
  const int H = in.kKvHeads, pages = in.pages;
  GroupPageSelectArgs a;
  in.fill(a);
  a.out_masks = nullptr;  // gbsa's lists need none (every head of a group attends its pages)
  a.keep = 0.1, a.n_min = 16, a.n_local = 1, a.by_score = true;
  a.workspace_bytes = group_page_select_workspace_size(a);  // by_score's: the larger
  cudaMalloc(&a.workspace, a.workspace_bytes);
  const Layout w = layout_of(a);
  char* ws = static_cast<char*>(a.workspace);
  const SortOut so{reinterpret_cast<uint32_t*>(ws + w.sort_keys), reinterpret_cast<int*>(ws + w.begin),
                   reinterpret_cast<int*>(ws + w.end)};

  const auto report = [&](const char* what, float us) { printf("| %d | %d | %s | %.1f |\n", batch, context, what, us); };
  const dim3 g0((pages + kPagesPerScoreCta - 1) / kPagesPerScoreCta, H, batch), g1(H, batch);
  report("score", time_us([&] { score_kernel<128><<<g0, kScoreWarps * 32>>>(a); }));
  report("select, plain", time_us([&] { select_kernel<false, false><<<g1, kThreads>>>(a, SortOut{}); }));
  report("select, by score", time_us([&] { select_kernel<true, true><<<g1, kThreads>>>(a, so); }));
  report("empty kernel (launch floor)", time_us([&] { bench::empty_kernel<<<g1, kThreads>>>(); }));
  report("all, by score", time_us([&] { group_page_select(a, nullptr); }));
  a.by_score = false;
  report("all, plain", time_us([&] { group_page_select(a, nullptr); }));
  cudaFree(a.workspace);
}

}  // namespace skim::cuda::group_select_bw

int main() {
  using namespace skim::cuda::group_select_bw;
  printf("gbsa selection kernels, 8B shape, keep 0.1\n");
  printf("| batch | context | kernel | us |\n|---|---|---|---|\n");
  for (int batch : {1, 8})
    for (int context : {32768, 131072}) run_shape(batch, context);
  return 0;
}
