// CSAttention's per-step kernels in the GPU forward (see cs_step.cuh).
#include "backend/cuda/cs_step.cuh"

#include <cuda_bf16.h>

#include <cmath>

namespace skim::cuda {

namespace {

__device__ __forceinline__ float bf16_value(uint16_t x) { return __bfloat162float(__ushort_as_bfloat16(x)); }

// CTA (row, query head): thread i copies dims i, i + blockDim.x, ... of a sampled vector.
__global__ void sample_kernel(const CsUnitLayout t, int slot, int layer, const uint16_t* q, const int32_t* positions,
                              int num_heads, int first, int stride) {
  const int r = blockIdx.x, hq = blockIdx.y, d = t.head_dim, group = num_heads / t.kv_heads;
  const long v = long(positions[r] - first) * group + hq % group;  // the vector's index in the group's prompt
  if (v < 0 || v % stride != 0 || v / stride >= t.sample_capacity) return;
  float* out = t.samples + (t.unit(slot, layer, hq / group) * t.sample_capacity + size_t(v / stride)) * d;
  const uint16_t* in = q + (size_t(r) * num_heads + hq) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) out[i] = bf16_value(in[i]);
}

// CTA per (layer, KV head) unit of the slot, a thread per dim: sample i <- sample 2i in
// ascending i (each thread alone on its dim: a read at 2i is never a slot written before it).
__global__ void halve_kernel(const CsUnitLayout t, int slot, int kept) {
  const int layer = blockIdx.x / t.kv_heads, h = blockIdx.x % t.kv_heads, d = t.head_dim;
  float* s = t.samples + t.unit(slot, layer, h) * t.sample_capacity * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x)
    for (int i = 1; 2 * i < kept; ++i) s[size_t(i) * d + j] = s[size_t(2 * i) * d + j];
}

// CTA (row, KV head): thread i computes dims i, i + blockDim.x, ... of the pooled query and the
// key; thread 0 the scalars and the argument structs.
__global__ void step_args_kernel(const CsStepArgs a) {
  const int r = blockIdx.x, h = blockIdx.y, kv = a.tables.kv_heads, d = a.tables.head_dim;
  const int group = a.num_heads / kv, s = r * kv + h, pos = a.positions[r], slot = a.row_slot[r];
  const int page = a.page_table[size_t(r) * a.max_pages_per_seq + pos / a.page_size];
  const uint16_t* k = a.k_pool + ((size_t(page) * kv + h) * a.page_size + pos % a.page_size) * d;
  const uint16_t* q = a.q + (size_t(r) * a.num_heads + size_t(h) * group) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float pooled = 0.0f;  // CsSelector's pooling: += q_g / group, in head order
    for (int g = 0; g < group; ++g) pooled += bf16_value(q[size_t(g) * d + i]) / float(group);
    a.queries[size_t(s) * d + i] = pooled;
    a.keys[size_t(s) * d + i] = bf16_value(k[i]);
  }
  if (threadIdx.x != 0) return;
  const size_t u = a.tables.unit(slot, a.layer, h);
  const CsTablesView view = a.tables.view(u);
  a.views[s] = view;
  const int ctx = pos + 1, wb = max(0, ctx - a.window);
  const int K = min(ctx, max(1, int(ceil(a.keep * double(ctx)))));
  a.context[s] = ctx;
  a.window_begin[s] = wb;
  a.n_pick[s] = max(0, K - (ctx - wb));
  if (a.period > 1) {  // one row per sequence a step: this thread alone advances the unit's counter
    const int done = a.searches_done[u];
    a.skip[s] = done % a.period != 0;
    if (a.skip[s]) a.window_begin[s] = min(wb, a.last_window[u]);  // the CPU's min(wb, search_window)
    a.searches_done[u] = done + 1;
    a.units[s] = int32_t(u);
  }
  CsInsertArgs in;
  in.head_dim = d;
  in.subspaces = a.tables.subspaces;
  in.centroids = a.tables.centroids;
  in.list_capacity = a.capacities[slot];
  in.list_stride = a.tables.list_stride;
  in.score_dot = a.score_dot;
  in.centroids_data = view.centroids;
  in.list_index = const_cast<int32_t*>(view.list_index);
  in.list_score = const_cast<uint16_t*>(view.list_score);
  in.list_size = const_cast<int32_t*>(view.list_size);
  in.admit = nullptr;
  in.key = a.keys + size_t(s) * d;
  in.position = pos;
  a.inserts[s] = in;
}

// CTA per search: a search that ran saves its picks as its unit's last; a skipped one takes them.
__global__ void keep_kernel(const CsKeepArgs a) {
  const int s = blockIdx.x;
  const size_t u = size_t(a.units[s]);
  int32_t* row = a.picks + size_t(s) * a.max_picks;
  int32_t* last = a.last_picks + u * a.keep_capacity;
  if (!a.skip[s]) {
    const int count = min(a.pick_counts[s], a.keep_capacity);
    for (int j = threadIdx.x; j < count; j += blockDim.x) last[j] = row[j];
    if (threadIdx.x == 0) a.last_count[u] = count, a.last_window[u] = a.window_begin[s];
  } else {
    const int count = a.last_count[u];
    for (int j = threadIdx.x; j < count; j += blockDim.x) row[j] = last[j];
    if (threadIdx.x == 0) a.pick_counts[s] = count;
  }
}

// CTA per search: the window's positions after its picks.
__global__ void token_plan_kernel(int32_t* picks, const int32_t* pick_counts, int max_picks, const int32_t* context,
                                  const int32_t* window_begin, int32_t* lens) {
  const int s = blockIdx.x, count = pick_counts[s], wb = window_begin[s], window = context[s] - wb;
  int32_t* list = picks + size_t(s) * max_picks;
  for (int j = threadIdx.x; j < window; j += blockDim.x) list[count + j] = wb + j;
  if (threadIdx.x == 0) lens[s] = count + window;
}

}  // namespace

cudaError_t cs_sample_queries(const CsUnitLayout& t, int slot, int layer, const uint16_t* q, const int32_t* positions,
                              int n, int num_heads, int first, int stride, cudaStream_t stream) {
  if (n < 0 || stride < 1 || t.kv_heads <= 0 || num_heads % t.kv_heads != 0 || !t.samples) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  sample_kernel<<<dim3(n, num_heads), 128, 0, stream>>>(t, slot, layer, q, positions, num_heads, first, stride);
  return cudaGetLastError();
}

cudaError_t cs_halve_samples(const CsUnitLayout& t, int slot, int kept, cudaStream_t stream) {
  if (kept < 0 || t.layers < 0 || !t.samples) return cudaErrorInvalidValue;
  if (kept < 3 || t.layers == 0) return cudaSuccess;
  halve_kernel<<<t.layers * t.kv_heads, 128, 0, stream>>>(t, slot, kept);
  return cudaGetLastError();
}

cudaError_t cs_step_args(const CsStepArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.tables.kv_heads <= 0 || a.num_heads % a.tables.kv_heads != 0 || a.window < 0 || a.keep <= 0)
    return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  step_args_kernel<<<dim3(a.n, a.tables.kv_heads), 128, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t cs_keep_picks(const CsKeepArgs& a, cudaStream_t stream) {
  if (a.searches < 0 || a.max_picks < 0 || a.keep_capacity < 0 || a.keep_capacity > a.max_picks) return cudaErrorInvalidValue;
  if (a.searches == 0) return cudaSuccess;
  keep_kernel<<<a.searches, 256, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t cs_token_plan(int32_t* picks, const int32_t* pick_counts, int max_picks, const int32_t* context,
                          const int32_t* window_begin, int searches, int32_t* lens, cudaStream_t stream) {
  if (searches < 0 || max_picks < 0) return cudaErrorInvalidValue;
  if (searches == 0) return cudaSuccess;
  token_plan_kernel<<<searches, 256, 0, stream>>>(picks, pick_counts, max_picks, context, window_begin, lens);
  return cudaGetLastError();
}

}  // namespace skim::cuda
