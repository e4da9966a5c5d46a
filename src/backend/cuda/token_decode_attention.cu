// Token decode attention on the GPU (see token_decode_attention.cuh).
#include "backend/cuda/token_decode_attention.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace skim::cuda {

namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kMaxHeads = 8;         // query heads per list (per CTA)
constexpr int kUnroll = 4;           // tokens a warp gathers before scoring them
constexpr int kMinChunkTokens = 256;  // below this a chunk's merge costs more than its spreading gains
constexpr int kMaxChunks = 256;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

struct Params {
  TokenDecodeArgs t;
  size_t page_stride, head_stride;  // elements
  int heads_per_list, chunks, chunk_tokens;
  float scale_log2;  // scores live in the exp2 domain
  float* part_o;     // [batch * num_heads][chunks][D]; null: one chunk, written to attn.o directly
  float* part_lse;   // [batch * num_heads][chunks], natural log
};

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// This lane's E consecutive elements of a bf16 row (E = 4: one 8-byte load; E = 2: 4 bytes).
template <int E>
__device__ __forceinline__ void load_row(const uint16_t* p, float (&x)[E]) {
  if constexpr (E == 4) {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(p));
    x[0] = bf16_bits_to_float(w.x & 0xffffu), x[1] = bf16_bits_to_float(w.x >> 16);
    x[2] = bf16_bits_to_float(w.y & 0xffffu), x[3] = bf16_bits_to_float(w.y >> 16);
  } else {
    const uint32_t w = __ldg(reinterpret_cast<const unsigned int*>(p));
    x[0] = bf16_bits_to_float(w & 0xffffu), x[1] = bf16_bits_to_float(w >> 16);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One head's online softmax state over this warp's tokens (m, l uniform over the lanes; acc
// this lane's E dims).
template <int E>
struct HeadState {
  float m = -INFINITY, l = 0.0f, acc[E] = {};

  __device__ __forceinline__ void add(float s, const float (&v)[E]) {
    const float m_new = fmaxf(m, s);
    const float corr = exp2f(m - m_new), p = exp2f(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = acc[e] * corr + p * v[e];
    m = m_new;
  }
};

// The CTA's warps' states of one head (wo [kWarps][D], wm and wl [kWarps]) merged; thread d < D
// of the CTA writes dim d (and thread 0 the lse) of the chunk's state: to the output directly,
// or as a partial.
template <int D>
__device__ __forceinline__ void write_merged(const Params& p, const float* wo, const float* wm, const float* wl, int b,
                                             int hq, int chunk) {
  const int d = threadIdx.x;
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w]);
  float L = 0.0f, o = 0.0f;
  if (M != -INFINITY) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(wm[w] - M);
      L += wl[w] * f;
      if (d < D) o += wo[w * D + d] * f;
    }
  }
  const bool empty = M == -INFINITY;
  const float lse = empty ? -INFINITY : M * kLn2 + logf(L);
  const size_t bh = size_t(b) * p.t.attn.num_heads + hq;
  if (!p.part_o) {
    if (d < D) p.t.attn.o[bh * D + d] = empty ? 0.0f : o / L;
    if (d == 0 && p.t.attn.lse) p.t.attn.lse[bh] = lse;
    return;
  }
  if (d < D) p.part_o[(bh * p.chunks + chunk) * D + d] = empty ? 0.0f : o / L;
  if (d == 0) p.part_lse[bh * p.chunks + chunk] = lse;
}

// CTA (chunk, list): the list's tokens [chunk * chunk_tokens, +chunk_tokens), warp w taking
// kUnroll consecutive tokens at a time, strided by the CTA's warps.
template <int D>
__global__ void __launch_bounds__(kThreads) gather_kernel(const Params p) {
  constexpr int E = D / 32;
  __shared__ float s_o[kMaxHeads][kWarps][D];
  __shared__ float s_m[kMaxHeads][kWarps], s_l[kMaxHeads][kWarps];
  const PagedDecodeArgs& a = p.t.attn;
  const int list = blockIdx.y, chunk = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = a.num_heads / a.num_kv_heads;
  const int per_row = p.t.lists_per_query_head ? a.num_heads : a.num_kv_heads;
  const int b = list / per_row, u = list % per_row;
  const int hq0 = p.t.lists_per_query_head ? u : u * group, kvh = hq0 / group, G = p.heads_per_list;
  const int len = min(max(p.t.token_lens[list], 0), p.t.max_tokens);
  const int begin = chunk * p.chunk_tokens, end = min(len, begin + p.chunk_tokens);
  const int32_t* positions = p.t.token_lists + size_t(list) * p.t.max_tokens;
  const int32_t* pages = a.page_table + size_t(b) * a.max_pages_per_seq;
  const size_t head_off = size_t(kvh) * p.head_stride + size_t(lane) * E;

  float q[kMaxHeads][E];
#pragma unroll
  for (int g = 0; g < kMaxHeads; ++g) {
    float x[E] = {};
    if (g < G) load_row<E>(a.q + (size_t(b) * a.num_heads + hq0 + g) * D + lane * E, x);
#pragma unroll
    for (int e = 0; e < E; ++e) q[g][e] = x[e] * p.scale_log2;
  }
  HeadState<E> st[kMaxHeads];

  for (int t0 = begin + warp * kUnroll; t0 < end; t0 += kWarps * kUnroll) {
    float k[kUnroll][E], v[kUnroll][E];
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {  // every load of the batch before any use
      const int pos = t0 + i < end ? __ldg(positions + t0 + i) : -1;
      if (pos < 0) continue;
      const size_t off = size_t(__ldg(pages + pos / a.page_size)) * p.page_stride + size_t(pos % a.page_size) * D + head_off;
      load_row<E>(a.k_pool + off, k[i]);
      load_row<E>(a.v_pool + off, v[i]);
    }
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      if (t0 + i >= end) break;  // uniform over the warp
#pragma unroll
      for (int g = 0; g < kMaxHeads; ++g) {
        if (g >= G) break;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) s = fmaf(q[g][e], k[i][e], s);
        st[g].add(warp_sum(s), v[i]);
      }
    }
  }

#pragma unroll
  for (int g = 0; g < kMaxHeads; ++g) {
    if (g >= G) break;
#pragma unroll
    for (int e = 0; e < E; ++e) s_o[g][warp][lane * E + e] = st[g].acc[e];
    if (lane == 0) s_m[g][warp] = st[g].m, s_l[g][warp] = st[g].l;
  }
  __syncthreads();
  for (int g = 0; g < G; ++g) write_merged<D>(p, &s_o[g][0][0], s_m[g], s_l[g], b, hq0 + g, chunk);
}

// One block per (sequence, query head): the chunks' partial states merged.
template <int D>
__global__ void __launch_bounds__(D) merge_kernel(const Params p) {
  const size_t bh = blockIdx.x;
  const int d = threadIdx.x, n = p.chunks;
  const float* lse = p.part_lse + bh * n;
  float M = -INFINITY;
  for (int c = 0; c < n; ++c) M = fmaxf(M, lse[c]);
  float L = 0.0f, o = 0.0f;
  if (M != -INFINITY)
    for (int c = 0; c < n; ++c) {
      const float f = expf(lse[c] - M);
      L += f;
      o += f * p.part_o[(bh * n + c) * D + d];
    }
  const bool empty = M == -INFINITY;
  p.t.attn.o[bh * D + d] = empty ? 0.0f : o / L;
  if (d == 0 && p.t.attn.lse) p.t.attn.lse[bh] = empty ? -INFINITY : M + logf(L);
}

struct Plan {
  int heads_per_list = 0, chunks = 1, chunk_tokens = 0;
  size_t workspace_bytes = 0;
};

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool supported(const TokenDecodeArgs& t) {
  const PagedDecodeArgs& a = t.attn;
  if (a.batch < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return false;
  if ((a.head_dim != 64 && a.head_dim != 128) || a.page_size <= 0 || t.max_tokens < 0) return false;
  if (a.tables_per_kv_head || a.head_masks) return false;
  return (t.lists_per_query_head ? 1 : a.group_size()) <= kMaxHeads;
}

cudaError_t make_plan(const TokenDecodeArgs& t, Plan& plan) {
  const PagedDecodeArgs& a = t.attn;
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess)
    e = a.head_dim == 64 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gather_kernel<64>, kThreads, 0)
                         : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gather_kernel<128>, kThreads, 0);
  if (e != cudaSuccess) return e;
  plan.heads_per_list = t.lists_per_query_head ? 1 : a.group_size();
  const long lists = std::max(1L, long(t.lists()));
  const long capacity = long(sms) * std::max(per_sm, 1);
  const int by_tokens = (std::max(t.max_tokens, 1) + kMinChunkTokens - 1) / kMinChunkTokens;
  plan.chunks = int(std::clamp<long>(std::min<long>(by_tokens, capacity / lists), 1, kMaxChunks));
  plan.chunk_tokens = (std::max(t.max_tokens, 1) + plan.chunks - 1) / plan.chunks;
  const size_t states = size_t(a.batch) * a.num_heads * plan.chunks;
  plan.workspace_bytes = plan.chunks == 1 ? 0 : align_up(states * a.head_dim * 4, 256) + align_up(states * 4, 256);
  return cudaSuccess;
}

}  // namespace

size_t token_decode_workspace_size(const TokenDecodeArgs& t) {
  Plan plan;
  if (!supported(t) || make_plan(t, plan) != cudaSuccess) return 0;
  return plan.workspace_bytes;
}

cudaError_t token_decode_attention(const TokenDecodeArgs& t, cudaStream_t stream) {
  if (!supported(t)) return cudaErrorInvalidValue;
  if (t.attn.batch == 0) return cudaSuccess;
  Plan plan;
  cudaError_t e = make_plan(t, plan);
  if (e != cudaSuccess) return e;
  if (plan.workspace_bytes > 0 && (t.attn.workspace == nullptr || t.attn.workspace_bytes < plan.workspace_bytes))
    return cudaErrorInvalidValue;
  const PagedDecodeArgs& a = t.attn;
  Params p{.t = t, .page_stride = a.page_stride_elems(), .head_stride = a.head_stride_elems(),
           .heads_per_list = plan.heads_per_list, .chunks = plan.chunks, .chunk_tokens = plan.chunk_tokens,
           .scale_log2 = a.scale * kLog2e, .part_o = nullptr, .part_lse = nullptr};
  if (plan.chunks > 1) {
    const size_t states = size_t(a.batch) * a.num_heads * plan.chunks;
    p.part_o = static_cast<float*>(a.workspace);
    p.part_lse = reinterpret_cast<float*>(static_cast<char*>(a.workspace) + align_up(states * a.head_dim * 4, 256));
  }
  const dim3 grid(unsigned(plan.chunks), unsigned(t.lists()));
  if (a.head_dim == 64)
    gather_kernel<64><<<grid, kThreads, 0, stream>>>(p);
  else
    gather_kernel<128><<<grid, kThreads, 0, stream>>>(p);
  if ((e = cudaGetLastError()) != cudaSuccess || plan.chunks == 1) return e;
  const unsigned rows = unsigned(size_t(a.batch) * a.num_heads);
  if (a.head_dim == 64)
    merge_kernel<64><<<rows, 64, 0, stream>>>(p);
  else
    merge_kernel<128><<<rows, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace skim::cuda
