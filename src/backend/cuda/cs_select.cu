// CSAttention's decode search on the GPU (see cs_select.cuh).
#include "backend/cuda/cs_select.cuh"

#include <cuda_fp16.h>

#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <cstdint>

#include "attention/top_list_heap.h"
#include "backend/cuda/page_select_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/sequential_norm.cuh"
#include "backend/cuda/workspace_carver.h"

namespace skim::cuda {

namespace {

using page_select::kThreads;
using page_select::order_key;

constexpr int kMaxSlice = 128, kMaxCentroids = 256, kMaxLists = 32;  // lists a search gathers
constexpr int kScatterThreads = 256, kScatterItems = 8;  // a scatter CTA: entries per thread in flight
constexpr int kSumThreads = 256, kSumItems = 4;  // a sum CTA: consecutive positions per thread
constexpr int kSumSpan = kSumThreads * kSumItems;  // a sum CTA's positions, and its segment's room

// Lists a search gathers at most: M subspaces x its back-off's width.
int lists_per_search(const CsSelectArgs& a) { return a.subspaces * std::min(a.centroids, a.backoff_top); }

// The workspace, per search s (J = lists_per_search):
//   chosen [s][J] list ids in the CPU's order (-1: unused), weight [s][J]
//   contrib [s][J][max_context] each chosen list's term per position (read where masked)
//   masks [s][max_context] bit j: list j holds the position (zero between calls)
//   segments [s][max_context] keys and positions: sum CTA b packs its touched positions below
//     the window, in position order, from b * kSumSpan; seg_count [s][segments] how many
//   packed [s][max_context] keys and positions: the segments back to back (pick's input)
//   touched [s] counts (zero between calls)
//   by_score: the picks' sort keys and positions [s][max_picks], segments, CUB's scratch.
struct Layout {
  int32_t* chosen = nullptr;
  float* weight = nullptr;
  float* contrib = nullptr;
  uint32_t *masks = nullptr, *seg_keys = nullptr, *packed_keys = nullptr;
  int32_t *seg_pos = nullptr, *packed_pos = nullptr;
  int* seg_count = nullptr;
  int* touched = nullptr;
  uint32_t *pick_keys = nullptr, *sorted_keys = nullptr;
  int32_t* pick_positions = nullptr;
  int *begin = nullptr, *end = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0, bytes = 0;
  int max_context = 0, lists = 0, segments = 0;
};

Layout layout(const CsSelectArgs& a, int max_context, char* base) {
  Layout w;
  w.max_context = max_context;
  w.lists = lists_per_search(a);
  const size_t S = size_t(a.searches), ctx = size_t(max_context), J = size_t(w.lists);
  const size_t picks = S * size_t(std::max(a.max_picks, 0));
  WorkspaceCarver carve(base);
  w.chosen = carve.take<int32_t>(S * J);
  w.weight = carve.take<float>(S * J);
  w.contrib = carve.take<float>(S * J * ctx);
  w.masks = carve.take<uint32_t>(S * ctx);
  w.segments = (max_context + kSumSpan - 1) / kSumSpan;
  w.seg_keys = carve.take<uint32_t>(S * ctx);
  w.seg_pos = carve.take<int32_t>(S * ctx);
  w.seg_count = carve.take<int>(S * size_t(w.segments));
  w.packed_keys = carve.take<uint32_t>(S * ctx);
  w.packed_pos = carve.take<int32_t>(S * ctx);
  w.touched = carve.take<int>(S);
  if (a.by_score) {
    w.pick_keys = carve.take<uint32_t>(picks);
    w.sorted_keys = carve.take<uint32_t>(picks);
    w.pick_positions = carve.take<int32_t>(picks);
    w.begin = carve.take<int>(S);
    w.end = carve.take<int>(S);
    cub::DeviceSegmentedRadixSort::SortPairsDescending(
        nullptr, w.scratch_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int(picks), a.searches,
        static_cast<const int*>(nullptr), static_cast<const int*>(nullptr));
    w.scratch = carve.take<char>(w.scratch_bytes);
  }
  w.bytes = carve.bytes();
  return w;
}

__device__ __forceinline__ bool skipped(const CsSelectArgs& a, int s) { return a.skip && a.skip[s]; }

__device__ __forceinline__ int context_of(const CsSelectArgs& a, const Layout& w, int s) {
  return min(max(a.context[s], 0), w.max_context);
}

// Step 1, CTA (subspace m, search s): the query slice's norm (the CPU's normalize: a double
// sum in order, then the float norm), its cosine to each centroid (a warp per centroid, the
// slice and centroid read coalesced), and the lists to gather, chosen by thread 0 with the
// CPU's rule (descending cosine, ties to the smaller centroid): chosen[s][m * T + k] for the
// k-th nearest, -1 past the back-off's take.
constexpr int kChooseThreads = 128;

__global__ void __launch_bounds__(kChooseThreads) choose_kernel(const CsSelectArgs a, const Layout w) {
  detail::pdl_enter();  // launched by launch_pdl
  __shared__ float slice[kMaxSlice], cos[kMaxCentroids];
  __shared__ bool taken[kMaxCentroids];
  __shared__ float weight;
  const int m = blockIdx.x, s = blockIdx.y, ds = a.head_dim / a.subspaces, C = a.centroids;
  if (skipped(a, s)) return;
  const int T = w.lists / a.subspaces, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* q = a.queries + size_t(s) * a.head_dim + size_t(m) * ds;
  const CsTablesView t = a.tables[s];
  for (int i = threadIdx.x; i < ds; i += blockDim.x) slice[i] = q[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    const float norm = sequential_norm([&](int i) { return slice[i]; }, ds);
    weight = a.score_dot ? norm : 1.0f;
    if (norm > 0)
      for (int i = 0; i < ds; ++i) slice[i] /= norm;
  }
  __syncthreads();
  // kBatch centroids a warp at once, every load issued before any sum (one memory latency, not
  // one per centroid); slices of at most 4 x 32 dims, the lanes' parts in fixed order.
  constexpr int kWarps = kChooseThreads / 32, kBatch = 4;
  for (int c0 = warp; c0 < C; c0 += kWarps * kBatch) {
    float d[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = c0 + b * kWarps;
      const float* centroid = t.centroids + (size_t(m) * C + min(c, C - 1)) * ds;
      d[b] = 0.0f;
#pragma unroll
      for (int r = 0; r < kMaxSlice / 32; ++r)
        if (const int i = lane + 32 * r; i < ds) d[b] += centroid[i] * slice[i];
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      for (int o = 16; o > 0; o >>= 1) d[b] += __shfl_xor_sync(0xffffffffu, d[b], o);
      if (const int c = c0 + b * kWarps; lane == 0 && c < C) cos[c] = d[b], taken[c] = false;
    }
  }
  __syncthreads();
  if (warp != 0) return;
  // Warp 0 takes the T nearest centroids in order (descending cosine, ties to the smaller
  // centroid, as the CPU's sort), each by a warp argmax over those not yet taken: a serial scan
  // of thread 0 over shared memory cost most of the kernel's 19 us.
  const auto nearest = [&]() {
    int bi = -1;
    float bv = 0.0f;
    for (int c = lane; c < C; c += 32)
      if (!taken[c] && (bi < 0 || cos[c] > bv)) bi = c, bv = cos[c];
    for (int o = 16; o > 0; o >>= 1) {
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bi = oi, bv = ov;
    }
    return bi;
  };
  const int best = nearest();
  const bool widen = cos[best] < float(a.backoff);
  const int take = widen ? T : 1;
  int32_t* chosen = w.chosen + size_t(s) * w.lists + size_t(m) * T;
  for (int k = 0; k < T; ++k) {
    const int pick = k == 0 ? best : k < take ? nearest() : -1;
    if (lane == 0) {
      if (pick >= 0) taken[pick] = true;
      chosen[k] = pick < 0 ? -1 : m * C + pick;
      w.weight[size_t(s) * w.lists + size_t(m) * T + k] = weight;
    }
    __syncwarp();
  }
  if (lane != 0) return;
  if (a.stats) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&a.stats->subspace_searches), 1ull);
    atomicAdd(&a.stats->best_cos, double(cos[best]));
    if (widen) atomicAdd(reinterpret_cast<unsigned long long*>(&a.stats->backoffs), 1ull);
  }
}

// Step 2, CTA (entry chunk, chosen list j, search s): each entry's term w (score - floor) into
// contrib[s][j][key], bit j into the key's mask. A list's keys are distinct, so the terms never
// collide; each thread issues its kScatterItems entries' loads together.
__global__ void __launch_bounds__(kScatterThreads) scatter_kernel(const CsSelectArgs a, const Layout w) {
  detail::pdl_enter();  // launched by launch_pdl
  const int s = blockIdx.z, j = blockIdx.y;
  if (skipped(a, s)) return;
  const int32_t l = w.chosen[size_t(s) * w.lists + j];
  if (l < 0) return;
  const CsTablesView t = a.tables[s];
  const int context = context_of(a, w, s), n = min(t.list_size[l], a.list_capacity);
  const float floor = a.missing_mean ? t.tail[l] : 0.0f, weight = w.weight[size_t(s) * w.lists + j];
  if (a.stats && blockIdx.x == 0 && threadIdx.x == 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(&a.stats->table_bytes),
              (unsigned long long)(uint64_t(n) * top_list::kEntryBytes + (a.missing_mean ? sizeof(float) : 0)));
  const int32_t* index = t.list_index + size_t(l) * a.list_capacity;
  const uint16_t* score = t.list_score + size_t(l) * a.list_capacity;
  float* contrib = w.contrib + (size_t(s) * w.lists + j) * w.max_context;
  uint32_t* masks = w.masks + size_t(s) * w.max_context;
  const int base = blockIdx.x * kScatterThreads * kScatterItems + threadIdx.x;
  int32_t key[kScatterItems];
  uint16_t sc[kScatterItems];
#pragma unroll
  for (int i = 0; i < kScatterItems; ++i) {
    const int e = base + i * kScatterThreads;
    key[i] = e < n ? index[e] : -1;
    sc[i] = e < n ? score[e] : uint16_t(0);
  }
#pragma unroll
  for (int i = 0; i < kScatterItems; ++i)
    if (key[i] >= 0 && key[i] < context) {
      contrib[key[i]] = weight * (__half2float(__ushort_as_half(sc[i])) - floor);
      atomicOr(masks + key[i], 1u << j);
    }
}

// Step 3, CTA (kSumSpan positions, search s), kSumItems consecutive positions a thread: each
// position's sum of its lists' terms in list order (the CPU's order of additions, from 0), its
// mask cleared for the next call; the touched positions below the window packed into the CTA's
// segment in position order with their sort keys (the pick then walks only those: most
// positions are untouched), the touched counts and the candidates.
__global__ void __launch_bounds__(kSumThreads) sum_kernel(const CsSelectArgs a, const Layout w) {
  detail::pdl_enter();  // launched by launch_pdl
  using Scan = cub::BlockScan<int, kSumThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int s = blockIdx.y, context = context_of(a, w, s);
  if (skipped(a, s)) return;
  const int window_begin = min(max(a.window_begin[s], 0), min(context, a.max_picks));
  uint32_t* masks = w.masks + size_t(s) * w.max_context;
  const float* contrib = w.contrib + size_t(s) * w.lists * w.max_context;
  const int p0 = blockIdx.x * kSumSpan + threadIdx.x * kSumItems;
  uint32_t mask[kSumItems], key[kSumItems];  // every item's mask loaded before any is summed
#pragma unroll
  for (int i = 0; i < kSumItems; ++i) mask[i] = p0 + i < context ? masks[p0 + i] : 0u;
  int touched = 0, below = 0;
#pragma unroll
  for (int i = 0; i < kSumItems; ++i) {
    const int p = p0 + i;
    float sum = 0.0f;
    for (uint32_t m = mask[i]; m != 0; m &= m - 1) sum += contrib[size_t(__ffs(m) - 1) * w.max_context + p];
    key[i] = order_key(sum);
    if (mask[i]) masks[p] = 0u;
    touched += mask[i] != 0u;
    below += mask[i] != 0u && p < window_begin;
    if (a.candidates && p < context) a.candidates[size_t(s) * a.candidate_stride + p] = mask[i] != 0u;
  }
  int rank, total;
  Scan(scan).ExclusiveSum(below, rank, total);
  const size_t segment = size_t(s) * w.max_context + size_t(blockIdx.x) * kSumSpan;
#pragma unroll
  for (int i = 0; i < kSumItems; ++i)
    if (mask[i] != 0u && p0 + i < window_begin) {
      w.seg_keys[segment + rank] = key[i];
      w.seg_pos[segment + rank] = p0 + i;
      ++rank;
    }
  if (threadIdx.x == 0) w.seg_count[size_t(s) * w.segments + blockIdx.x] = total;
  if (!a.stats) return;  // the touched count is a statistic only
  for (int o = 16; o > 0; o >>= 1) touched += __shfl_xor_sync(0xffffffffu, touched, o);
  if ((threadIdx.x & 31) == 0 && touched) atomicAdd(w.touched + s, touched);
}

// The segments of search s below its window packed back to back, in position order: offsets by
// a block scan of the counts (kThreads segments, 512K positions, a round), then a warp a segment.
// Returns the packed count. Every thread of the CTA calls it.
__device__ int pack_segments(const Layout& w, int s, int window_begin, int* seg_off, int* seg_n,
                             page_select::SelectScratch::Scan::TempStorage& scan) {
  using page_select::kThreads;
  const int segments = (window_begin + kSumSpan - 1) / kSumSpan, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const size_t row = size_t(s) * w.max_context;
  int carry = 0;
  for (int g0 = 0; g0 < segments; g0 += kThreads) {
    const int g = g0 + threadIdx.x;
    const int n = g < segments ? w.seg_count[size_t(s) * w.segments + g] : 0;
    int off, total;
    page_select::SelectScratch::Scan(scan).ExclusiveSum(n, off, total);
    seg_off[threadIdx.x] = carry + off;
    seg_n[threadIdx.x] = n;
    __syncthreads();
    for (int j = warp; j < kThreads && g0 + j < segments; j += kThreads / 32) {
      const size_t from = row + size_t(g0 + j) * kSumSpan, to = row + size_t(seg_off[j]);
      constexpr int kBatch = 4;  // entries a lane loads before it stores any (one latency for 4)
      for (int e0 = lane; e0 < seg_n[j]; e0 += 32 * kBatch) {
        uint32_t k[kBatch];
        int32_t p[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int e = e0 + 32 * b;
          k[b] = e < seg_n[j] ? __ldg(w.seg_keys + from + e) : 0u;
          p[b] = e < seg_n[j] ? __ldg(w.seg_pos + from + e) : 0;
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
          if (const int e = e0 + 32 * b; e < seg_n[j]) w.packed_keys[to + e] = k[b], w.packed_pos[to + e] = p[b];
      }
    }
    carry += total;
    __syncthreads();  // seg_off, seg_n and the scan storage are rewritten next round; the copies seen
  }
  return carry;
}

// Step 4, one CTA per search: the n_pick largest sums below the window by page selection's
// radix select over the packed touched positions, in position order (ties to the smaller
// position); the counts cleared for the next call.
__global__ void __launch_bounds__(kThreads) pick_kernel(const CsSelectArgs a, const Layout w) {
  detail::pdl_enter();  // launched by launch_pdl
  __shared__ page_select::SelectSmem sel;
  const int s = blockIdx.x, context = context_of(a, w, s);
  if (skipped(a, s)) {  // nothing written but an empty sort segment (by_score sorts every search's)
    if (a.by_score && threadIdx.x == 0) w.begin[s] = w.end[s] = s * a.max_picks;
    return;
  }
  const int window_begin = min(max(a.window_begin[s], 0), min(context, a.max_picks));
  // The packing's offsets and counts borrow the select's key staging (free until the select
  // starts; static shared memory has no room for both).
  static_assert(2 * kThreads <= page_select::kSmemKeys, "the packing's scratch fits the key staging");
  int* seg_off = reinterpret_cast<int*>(sel.keys);
  const int packed = pack_segments(w, s, window_begin, seg_off, seg_off + kThreads, sel.scan);
  const int n = min(max(a.n_pick[s], 0), packed);
  const uint32_t* keys = w.packed_keys + size_t(s) * w.max_context;
  const int32_t* positions = w.packed_pos + size_t(s) * w.max_context;
  int32_t* picks = a.picks + size_t(s) * a.max_picks;
  if (n > 0) {
    uint32_t* pick_keys = a.by_score ? w.pick_keys + size_t(s) * a.max_picks : nullptr;
    int32_t* pick_positions = a.by_score ? w.pick_positions + size_t(s) * a.max_picks : picks;
    page_select::select_top_pages(
        sel, keys, packed, n,
        [&](int p, int rank) {
          pick_positions[rank] = positions[p];
          if (pick_keys) pick_keys[rank] = keys[p];
        },
        [](int) {});
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a.pick_counts[s] = n;
    if (a.by_score) w.begin[s] = s * a.max_picks, w.end[s] = s * a.max_picks + n;
    if (a.stats) atomicAdd(reinterpret_cast<unsigned long long*>(&a.stats->candidates), (unsigned long long)w.touched[s]);
    w.touched[s] = 0;
  }
}

bool supported(const CsSelectArgs& a, int max_context) {
  if (a.searches < 0 || a.subspaces <= 0 || a.head_dim <= 0 || a.head_dim % a.subspaces != 0) return false;
  return a.head_dim / a.subspaces <= kMaxSlice && a.centroids > 0 && a.centroids <= kMaxCentroids &&
         a.list_capacity >= 0 && a.backoff_top >= 1 && lists_per_search(a) <= kMaxLists && a.max_picks >= 0 &&
         max_context > 0 && (!a.candidates || a.candidate_stride >= max_context);
}

}  // namespace

size_t cs_select_workspace_size(const CsSelectArgs& a, int max_context) {
  return supported(a, max_context) ? layout(a, max_context, nullptr).bytes : 0;
}

cudaError_t cs_select(const CsSelectArgs& a, const CsSelectWorkspace& ws, cudaStream_t stream) {
  if (!supported(a, ws.max_context) || ws.data == nullptr) return cudaErrorInvalidValue;
  const Layout w = layout(a, ws.max_context, static_cast<char*>(ws.data));
  if (ws.bytes < w.bytes) return cudaErrorInvalidValue;
  if (a.searches == 0) return cudaSuccess;
  (void)launch_pdl(choose_kernel, dim3(a.subspaces, a.searches), kChooseThreads, 0, stream, a, w);
  const int per_scatter = kScatterThreads * kScatterItems;
  const dim3 scatter((std::max(a.list_capacity, 1) + per_scatter - 1) / per_scatter, w.lists, a.searches);
  (void)launch_pdl(scatter_kernel, scatter, kScatterThreads, 0, stream, a, w);
  (void)launch_pdl(sum_kernel, dim3(w.segments, a.searches), kSumThreads, 0, stream, a, w);
  (void)launch_pdl(pick_kernel, a.searches, kThreads, 0, stream, a, w);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || !a.by_score) return e;
  // Descending sum; the sort is stable and the picks come in position order, so equal sums stay
  // by position, as on the CPU. Each search's segment sorts into its own row of picks.
  size_t scratch = w.scratch_bytes;
  return cub::DeviceSegmentedRadixSort::SortPairsDescending(w.scratch, scratch, w.pick_keys, w.sorted_keys,
                                                            w.pick_positions, a.picks, a.searches * a.max_picks,
                                                            a.searches, w.begin, w.end, 0, 32, stream);
}

}  // namespace skim::cuda
