// CSAttention's decode search on the GPU (see cs_select.cuh).
#include "backend/cuda/cs_select.cuh"

#include <cuda_fp16.h>

#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/page_select_common.cuh"

namespace skim::cuda {

namespace {

using page_select::kThreads;
using page_select::order_key;

constexpr int kMaxSlice = 128, kMaxCentroids = 256;
constexpr uint64_t kEntryBytes = sizeof(int32_t) + sizeof(uint16_t);

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// The workspace, per search s: sums and marks over positions [s][max_context] (zero between
// calls), the touched positions [s][cap], the sort keys of positions [s][max_context]; with
// by_score the picks' sort keys and positions [s][max_picks], the segments and CUB's scratch.
struct Layout {
  float* sums = nullptr;
  uint8_t* marks = nullptr;
  int32_t* touched = nullptr;
  uint32_t* keys = nullptr;
  uint32_t *pick_keys = nullptr, *sorted_keys = nullptr;
  int32_t* pick_positions = nullptr;
  int *begin = nullptr, *end = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0, touched_cap = 0, bytes = 0;
  int max_context = 0;
};

Layout layout(const CsSelectArgs& a, int max_context, char* base) {
  Layout w;
  w.max_context = max_context;
  const size_t S = size_t(a.searches), ctx = size_t(max_context), picks = S * size_t(std::max(a.max_picks, 0));
  w.touched_cap = std::min(ctx, size_t(a.subspaces) * std::min(a.centroids, a.backoff_top) * size_t(a.list_capacity));
  size_t at = 0;
  auto take = [&](size_t n) {
    char* p = base ? base + at : nullptr;
    at += align256(n);
    return p;
  };
  w.sums = reinterpret_cast<float*>(take(S * ctx * sizeof(float)));
  w.marks = reinterpret_cast<uint8_t*>(take(S * ctx));
  w.touched = reinterpret_cast<int32_t*>(take(S * w.touched_cap * sizeof(int32_t)));
  w.keys = reinterpret_cast<uint32_t*>(take(S * ctx * sizeof(uint32_t)));
  if (a.by_score) {
    w.pick_keys = reinterpret_cast<uint32_t*>(take(picks * sizeof(uint32_t)));
    w.sorted_keys = reinterpret_cast<uint32_t*>(take(picks * sizeof(uint32_t)));
    w.pick_positions = reinterpret_cast<int32_t*>(take(picks * sizeof(int32_t)));
    w.begin = reinterpret_cast<int*>(take(S * sizeof(int)));
    w.end = reinterpret_cast<int*>(take(S * sizeof(int)));
    cub::DeviceSegmentedRadixSort::SortPairsDescending(
        nullptr, w.scratch_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int(picks), a.searches,
        static_cast<const int*>(nullptr), static_cast<const int*>(nullptr));
    w.scratch = take(w.scratch_bytes);
  }
  w.bytes = at;
  return w;
}

// The search's shared state besides the radix select's.
struct SearchSmem {
  float slice[kMaxSlice];
  float cos[kMaxCentroids];
  int chosen[kMaxCentroids];
  int take, touched, below;
  float weight;
};

// Step 1 for subspace m: the slice's norm and cosines, and the lists to gather (sm.chosen,
// sm.take); thread 0 decides, as the CPU does, with its ties to the smaller centroid.
__device__ void choose_lists(const CsSelectArgs& a, const CsTablesView& t, const float* q, int m, SearchSmem& sm) {
  const int ds = a.head_dim / a.subspaces, C = a.centroids;
  if (threadIdx.x == 0) {  // the CPU's normalize: a double sum in order, then the float norm
    double s2 = 0;
    for (int i = 0; i < ds; ++i) s2 += double(q[m * ds + i]) * q[m * ds + i];
    const float norm = float(sqrt(s2));
    for (int i = 0; i < ds; ++i) sm.slice[i] = norm > 0 ? q[m * ds + i] / norm : q[m * ds + i];
    sm.weight = a.score_dot ? norm : 1.0f;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float* centroid = t.centroids + (size_t(m) * C + c) * ds;
    float d = 0.0f;
    for (int i = 0; i < ds; ++i) d += centroid[i] * sm.slice[i];
    sm.cos[c] = d;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int best = 0;
    for (int c = 1; c < C; ++c)
      if (sm.cos[c] > sm.cos[best]) best = c;
    const bool widen = sm.cos[best] < float(a.backoff);
    sm.take = widen ? min(C, a.backoff_top) : 1;
    for (int k = 0; k < sm.take; ++k) {  // the k-th nearest: descending cosine, ties by index
      int pick = -1;
      for (int c = 0; c < C; ++c) {
        bool used = false;
        for (int j = 0; j < k; ++j) used |= sm.chosen[j] == c;
        if (!used && (pick < 0 || sm.cos[c] > sm.cos[pick])) pick = c;
      }
      sm.chosen[k] = pick;
    }
    if (a.stats) {
      atomicAdd(reinterpret_cast<unsigned long long*>(&a.stats->subspace_searches), 1ull);
      atomicAdd(&a.stats->best_cos, double(sm.cos[best]));
      if (widen) atomicAdd(reinterpret_cast<unsigned long long*>(&a.stats->backoffs), 1ull);
    }
  }
  __syncthreads();
}

// Step 2 for list l: its entries added into the sums (the list's keys are distinct, so no two
// threads share a position), newly touched positions listed.
__device__ void gather_list(const CsSelectArgs& a, const CsTablesView& t, size_t l, int context, const Layout& w,
                            float* sums, uint8_t* marks, int32_t* touched, SearchSmem& sm) {
  const float floor = a.missing_mean ? t.tail[l] : 0.0f, weight = sm.weight;
  const int n = min(t.list_size[l], a.list_capacity);
  const int32_t* index = t.list_index + l * size_t(a.list_capacity);
  const uint16_t* score = t.list_score + l * size_t(a.list_capacity);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t key = index[i];
    if (key < 0 || key >= context) continue;
    if (!marks[key]) {
      marks[key] = 1;
      const int slot = atomicAdd(&sm.touched, 1);
      if (slot < int(w.touched_cap)) touched[slot] = key;
    }
    sums[key] += weight * (__half2float(__ushort_as_half(score[i])) - floor);
  }
  if (a.stats && threadIdx.x == 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(&a.stats->table_bytes),
              (unsigned long long)(uint64_t(n) * kEntryBytes + (a.missing_mean ? sizeof(float) : 0)));
  __syncthreads();  // the next list may hold the same keys
}

// One CTA per search: steps 1-2 per subspace, then the picks, the candidates, and the clearing.
__global__ void __launch_bounds__(kThreads) search_kernel(const CsSelectArgs a, const Layout w) {
  __shared__ page_select::SelectSmem sel;
  __shared__ SearchSmem sm;
  const int s = blockIdx.x;
  const CsTablesView t = a.tables[s];
  const int context = min(max(a.context[s], 0), w.max_context);
  const int window_begin = min(max(a.window_begin[s], 0), min(context, a.max_picks));
  float* sums = w.sums + size_t(s) * w.max_context;
  uint8_t* marks = w.marks + size_t(s) * w.max_context;
  int32_t* touched = w.touched + size_t(s) * w.touched_cap;
  uint32_t* keys = w.keys + size_t(s) * w.max_context;
  if (threadIdx.x == 0) sm.touched = sm.below = 0;
  const float* q = a.queries + size_t(s) * a.head_dim;
  for (int m = 0; m < a.subspaces; ++m) {
    choose_lists(a, t, q, m, sm);
    for (int k = 0; k < sm.take; ++k)
      gather_list(a, t, size_t(m) * a.centroids + sm.chosen[k], context, w, sums, marks, touched, sm);
  }

  // Step 3: the n_pick best touched sums below the window, in position order.
  int below = 0;
  for (int p = threadIdx.x; p < window_begin; p += blockDim.x) {
    keys[p] = marks[p] ? order_key(sums[p]) : 0u;  // untouched: below every touched key
    below += marks[p];
  }
  atomicAdd(&sm.below, below);
  __syncthreads();
  const int n = min(max(a.n_pick[s], 0), sm.below);
  int32_t* picks = a.picks + size_t(s) * a.max_picks;
  if (n > 0) {
    uint32_t* pick_keys = a.by_score ? w.pick_keys + size_t(s) * a.max_picks : nullptr;
    int32_t* pick_positions = a.by_score ? w.pick_positions + size_t(s) * a.max_picks : picks;
    page_select::select_top_pages(
        sel, keys, window_begin, n,
        [&](int p, int rank) {
          pick_positions[rank] = p;
          if (pick_keys) pick_keys[rank] = keys[p];
        },
        [](int) {});
  }
  if (threadIdx.x == 0) {
    a.pick_counts[s] = n;
    if (a.by_score) w.begin[s] = s * a.max_picks, w.end[s] = s * a.max_picks + n;
    if (a.stats) atomicAdd(reinterpret_cast<unsigned long long*>(&a.stats->candidates), (unsigned long long)sm.touched);
  }
  if (a.candidates)
    for (int k = threadIdx.x; k < context; k += blockDim.x) a.candidates[size_t(s) * a.candidate_stride + k] = marks[k];
  __syncthreads();
  const int count = min(sm.touched, int(w.touched_cap));
  for (int i = threadIdx.x; i < count; i += blockDim.x) {  // left zero for the next call
    sums[touched[i]] = 0.0f;
    marks[touched[i]] = 0;
  }
}

bool supported(const CsSelectArgs& a, int max_context) {
  if (a.searches < 0 || a.subspaces <= 0 || a.head_dim <= 0 || a.head_dim % a.subspaces != 0) return false;
  return a.head_dim / a.subspaces <= kMaxSlice && a.centroids > 0 && a.centroids <= kMaxCentroids &&
         a.list_capacity >= 0 && a.backoff_top >= 1 && a.max_picks >= 0 && max_context > 0 &&
         (!a.candidates || a.candidate_stride >= max_context);
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
  search_kernel<<<a.searches, kThreads, 0, stream>>>(a, w);
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
