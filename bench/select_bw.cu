// Quest's page selection kernels alone on the 8B shape (32 q / 8 KV heads of 128, 16-token
// pages, each sequence's pages in order, budget 0.1): where the selection's time goes and what
// the digests' read could reach. Standalone:
//   nvcc -O3 -arch=sm_90a -std=c++20 -Isrc -Iinclude bench/select_bw.cu -o select_bw && ./select_bw
// Rows (each the mean of 50 back-to-back launches; at b1 32K the digests fit in L2, so the reads
// there run above HBM's rate):
//   read contiguous       every digest byte by 16-byte loads in address order: the ceiling
//   read, score's pattern the score kernel's loads alone (ids, then a warp's 16 pages' digests)
//   score                 quest's score kernel
//   select 1/SM, 2/SM     quest's select kernel at each register bound (quest_page_select
//                         launches 2/SM where the grid has more CTAs than the GPU has SMs)
//   union                 quest's union kernel
//   all                   quest_page_select (score + select + union)
//   all, by score         the same with by_score (ART's order: each union sorted by score)
//   empty kernel          a launch of the select's grid doing nothing: the launch floor here
// Measured and dropped (H100, 2026-11-27, bench/results/2026-11-27-s28-select-walk/): a score
// CTA's warps over the KV heads first (a page's 2 KB of digests read together) was no faster;
// two batches of 16 pages a warp, both in flight before either is scored (205 registers, one
// CTA an SM), was slower: 30.4 -> 37.6 us at b8 32K, 99.8 -> 114.8 at b8 128K; and one CTA per
// (sequence, KV head) selecting its whole group (a histogram per head, the passes interleaved)
// and listing the union from the keep bits, equal lists but 25 us alone at b1 and b8 32K against
// 12.8 + 5.3 for the select and union (the passes' shared-memory atomics grow with the heads;
// bench/results/2026-11-28-s29-art-verdict-warp/); and a persistent walk whose warps stream
// their items' digests through cp.async rings in shared memory (33-37.5 us at b8 32K at every
// ring shape, 2026-11-28, bench/results/2026-11-28-s30-score-shapes/score-walk.patch). The
// score kernels' shape (pages a warp, warps a CTA, CTAs an SM) was chosen with this bench's
// score rows (kWarpPages, kScoreWarps, kScoreMinCtas in page_select_common.cuh).
#include <cstdio>
#include <vector>

// Included through -I (not by a relative path), so that the previous revision's tree can be
// measured by the same bench: -Ibuild-legacy/tree/src -Ibuild-legacy/tree/include.
#include "backend/cuda/quest_page_select.cu"
#include "backend/cuda/segment_sort.cu"
#include "kernel_timing.cuh"

namespace skim::cuda::select_bw {

using namespace page_select;
using bench::empty_kernel;
using bench::time_us;

__global__ void read_contiguous(const uint4* x, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(x + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

// The score kernel's loads alone (ids, then the digests of a warp's 16 pages), no query and no
// store: what its access pattern allows.
__global__ void __launch_bounds__(kScoreWarps * 32) read_score_pattern(const QuestPageSelectArgs a, unsigned* sink) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int b = blockIdx.z, kvh = blockIdx.y, p0 = blockIdx.x * kPagesPerScoreCta + warp * kWarpPages;
  const int m = pages_of(context_of(a, b), a.page_size);
  if (p0 >= m) return;
  const int id = WarpDigests<128>::lane_page_id(a.page_table + size_t(b) * a.max_pages_per_seq, p0, m, lane);
  WarpDigests<128> dig;
  dig.load(a.kmin, a.kmax, a.num_kv_heads, kvh, id, p0, m, lane);
  unsigned acc = 0;
#pragma unroll
  for (int j = 0; j < kWarpPages; ++j) acc ^= dig.lo[j].x ^ dig.lo[j].y ^ dig.hi[j].x ^ dig.hi[j].y;
  if (acc == 0x12345678u) *sink = acc;
}

void run_shape(int batch, int context) {
  const bench::SelectionBuffers in(batch, context);
  const int H = in.kKvHeads, heads = in.kHeads, pages = in.pages;
  const size_t digest_elems = in.digest_elems;
  const uint16_t* kmin = in.kmin;
  const uint16_t* kmax = in.kmax;
  unsigned* sink;
  cudaMalloc(&sink, 4);
  QuestPageSelectArgs a;
  in.fill(a);
  a.budget = 0.1, a.min_tokens = 0;
  a.workspace_bytes = quest_page_select_workspace_size(a);
  cudaMalloc(&a.workspace, a.workspace_bytes);

  const double mb = 2.0 * digest_elems * 2 / 1e6;
  const auto report = [&](const char* what, float us, bool bytes) {
    if (bytes) printf("| %d | %d | %s | %.1f | %.0f |\n", batch, context, what, us, mb / us * 1e3);
    else printf("| %d | %d | %s | %.1f | - |\n", batch, context, what, us);
  };
  report("read contiguous", time_us([&] {
           read_contiguous<<<132 * 8, 256>>>(reinterpret_cast<const uint4*>(kmin), digest_elems * 2 / 16, sink);
           read_contiguous<<<132 * 8, 256>>>(reinterpret_cast<const uint4*>(kmax), digest_elems * 2 / 16, sink);
         }),
         true);
  const dim3 g0((pages + kPagesPerScoreCta - 1) / kPagesPerScoreCta, H, batch);
  report("read, score's pattern", time_us([&] { read_score_pattern<<<g0, kScoreWarps * 32>>>(a, sink); }), true);
  report("score", time_us([&] { score_kernel<128><<<g0, kScoreWarps * 32>>>(a); }), true);
  report("select 1/SM", time_us([&] { select_kernel<1><<<dim3(heads, batch), kThreads>>>(a); }), false);
  report("select 2/SM", time_us([&] { select_kernel<2><<<dim3(heads, batch), kThreads>>>(a); }), false);
  report("union", time_us([&] { union_kernel<false><<<dim3(H, batch), kThreads>>>(a, ByScore{}); }), false);
  report("empty kernel (launch floor)", time_us([&] { empty_kernel<<<dim3(heads, batch), kThreads>>>(); }), false);
  report("all", time_us([&] { quest_page_select(a, nullptr); }), false);
  a.by_score = true;  // ART's order: the unions sorted by score (inside the union CTA up to 2048 pages)
  void* plain = a.workspace;
  a.workspace_bytes = quest_page_select_workspace_size(a);
  cudaMalloc(&a.workspace, a.workspace_bytes);
  report("all, by score", time_us([&] { quest_page_select(a, nullptr); }), false);
  cudaFree(plain);
  cudaFree(sink), cudaFree(a.workspace);
}

}  // namespace skim::cuda::select_bw

int main() {
  using namespace skim::cuda::select_bw;
  printf("quest selection kernels, 8B shape, budget 0.1 (GB/s: digest bytes / time)\n");
  printf("| batch | context | kernel | us | GB/s |\n|---|---|---|---|---|\n");
  for (int batch : {1, 8})
    for (int context : {32768, 131072}) run_shape(batch, context);
  return 0;
}
