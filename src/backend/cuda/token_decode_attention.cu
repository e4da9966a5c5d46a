// Token decode attention on the GPU (see token_decode_attention.cuh).
#include "backend/cuda/token_decode_attention.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/warp_transpose_sum.cuh"

namespace skim::cuda {

namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kMaxHeads = 8;         // query heads per list (per CTA)
constexpr int kTile = 16;            // tokens a warp gathers, then scores, at a time
constexpr int kMinChunkTokens = 256;  // below this a chunk's merge costs more than its spreading gains
constexpr int kMaxChunks = 256;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

struct Params {
  TokenDecodeArgs t;
  size_t page_stride, head_stride;  // elements
  int heads_per_list, chunks;
  float scale_log2;  // scores live in the exp2 domain
  float* part_o;     // [batch * num_heads][chunks][D]; null: one chunk, written to attn.o directly
  float* part_lse;   // [batch * num_heads][chunks], natural log
};

__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// This lane's E consecutive elements of a bf16 row, raw (E = 4: one 8-byte load; E = 2: 4 bytes).
template <int E>
using RowBits = std::conditional_t<E == 4, uint2, uint32_t>;

template <int E>
__device__ __forceinline__ void unpack(const RowBits<E>& r, float (&x)[E]) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&r);
#pragma unroll
  for (int i = 0; i < E / 2; ++i) x[2 * i] = lo_bf16(w[i]), x[2 * i + 1] = hi_bf16(w[i]);
}

// Up to G heads' online softmax states over one warp's tokens, in the exp2 domain: m and l are
// uniform over the lanes, acc holds this lane's E dims.
template <int G, int E>
struct WarpStates {
  float m[G], l[G], acc[G][E];

  __device__ __forceinline__ WarpStates() {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
    }
  }

  // Head g takes a tile's scores (lane 2j and 2j + 1: token j's, -inf past the list): rescales
  // its state to the new maximum and returns this lane's token's weight.
  __device__ __forceinline__ float rescale(int g, float score) {
    float tile_max = score;
#pragma unroll
    for (int o = 2; o < 32; o <<= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
    const float m_new = fmaxf(m[g], tile_max);  // finite: a tile holds a token
    const float corr = exp2f(m[g] - m_new), w = exp2f(score - m_new);
    float sum = w;  // lane pairs hold the same token: summed over the 16 pairs
#pragma unroll
    for (int o = 2; o < 32; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    l[g] = l[g] * corr + sum;
    m[g] = m_new;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] *= corr;
    return w;
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

// This lane's offsets of the tile's rows: lane j < kTile gets token t0 + j's row (-1 past end).
__device__ __forceinline__ long long tile_row(const PagedDecodeArgs& a, const int32_t* positions, const int32_t* pages,
                                              size_t page_stride, int d, int t0, int end, int lane) {
  if (lane >= kTile || t0 + lane >= end) return -1;
  const int pos = __ldg(positions + t0 + lane);
  return (long long)(size_t(__ldg(pages + pos / a.page_size)) * page_stride + size_t(pos % a.page_size) * d);
}

// CTA (chunk, list): the chunk-th of the list's `chunks` equal slices (at least a tile per warp;
// the slices split the list's own length, read here, not max_tokens: a list far shorter than its
// capacity, as cs's top-K of a capacity sized for the whole context, still spreads over every
// CTA the plan gave it), warp w taking
// tiles of kTile consecutive tokens, strided by the CTA's warps. Per tile a warp issues every
// K and V load (8 bytes a lane and row at head_dim 128), scores the 16 tokens for each head at
// once (lane partials summed by transpose_sum16: lanes 2j, 2j + 1 end with token j's score),
// takes the tile into each head's online softmax, and adds the weighted V rows (the weights
// through shared memory, four tokens a load). G: the largest heads per list it serves.
template <int D, int G>
__global__ void __launch_bounds__(kThreads) gather_kernel(const Params p) {
  detail::pdl_enter();  // launched by launch_pdl
  constexpr int E = D / 32;
  __shared__ float s_o[G][kWarps][D];
  __shared__ float s_m[G][kWarps], s_l[G][kWarps];
  __shared__ float4 s_w[kWarps][G][kTile / 4];
  const PagedDecodeArgs& a = p.t.attn;
  const int list = blockIdx.y, chunk = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = a.num_heads / a.num_kv_heads;
  const int per_row = p.t.lists_per_query_head ? a.num_heads : a.num_kv_heads;
  const int b = list / per_row, u = list % per_row;
  const int hq0 = p.t.lists_per_query_head ? u : u * group, kvh = hq0 / group, heads = p.heads_per_list;
  const int len = min(max(p.t.token_lens[list], 0), p.t.max_tokens);
  const int per = max((len + p.chunks - 1) / p.chunks, kWarps * kTile);
  const int begin = min(len, chunk * per), end = min(len, begin + per);
  const int32_t* positions = p.t.token_lists + size_t(list) * p.t.max_tokens;
  const int32_t* pages = a.page_table + size_t(b) * a.max_pages_per_seq;
  const size_t head_off = size_t(kvh) * p.head_stride + size_t(lane) * E;

  float q[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    RowBits<E> r{};
    if (g < heads) r = __ldg(reinterpret_cast<const RowBits<E>*>(a.q + (size_t(b) * a.num_heads + hq0 + g) * D + lane * E));
    unpack<E>(r, q[g]);
#pragma unroll
    for (int e = 0; e < E; ++e) q[g][e] *= p.scale_log2;
  }
  WarpStates<G, E> st;
  float* w_flat = reinterpret_cast<float*>(&s_w[warp][0][0]);

  constexpr int kStride = kWarps * kTile;
  long long my_row = tile_row(a, positions, pages, p.page_stride, D, begin + warp * kTile, end, lane);
  for (int t0 = begin + warp * kTile; t0 < end; t0 += kStride) {
    RowBits<E> k[kTile], v[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) {  // every load of the tile before any use
      const long long row = __shfl_sync(0xffffffffu, my_row, j);
      k[j] = v[j] = RowBits<E>{};
      if (row >= 0) {
        k[j] = __ldg(reinterpret_cast<const RowBits<E>*>(a.k_pool + size_t(row) + head_off));
        v[j] = __ldg(reinterpret_cast<const RowBits<E>*>(a.v_pool + size_t(row) + head_off));
      }
    }
    // The next tile's rows (positions, then pages: a dependent pair) load while this one scores.
    my_row = tile_row(a, positions, pages, p.page_stride, D, t0 + kStride, end, lane);
    const bool valid = t0 + (lane >> 1) < end;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g >= heads) break;
      float s[kTile];
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        float x[E];
        unpack<E>(k[j], x);
        s[j] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) s[j] = fmaf(q[g][e], x[e], s[j]);
      }
      const float sum = transpose_sum16(s, lane);  // every lane shuffles
      const float score = valid ? sum : -INFINITY;
      const float w = st.rescale(g, score);
      if ((lane & 1) == 0) w_flat[g * kTile + (lane >> 1)] = w;
    }
    __syncwarp();
#pragma unroll
    for (int j4 = 0; j4 < kTile / 4; ++j4) {
      float4 w[G];
#pragma unroll
      for (int g = 0; g < G; ++g)
        if (g < heads) w[g] = s_w[warp][g][j4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float x[E];
        unpack<E>(v[4 * j4 + c], x);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          if (g >= heads) break;
          const float wt = c == 0 ? w[g].x : c == 1 ? w[g].y : c == 2 ? w[g].z : w[g].w;
#pragma unroll
          for (int e = 0; e < E; ++e) st.acc[g][e] = fmaf(wt, x[e], st.acc[g][e]);
        }
      }
    }
    __syncwarp();  // the weights are rewritten by the next tile
  }

#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g >= heads) break;
#pragma unroll
    for (int e = 0; e < E; ++e) s_o[g][warp][lane * E + e] = st.acc[g][e];
    if (lane == 0) s_m[g][warp] = st.m[g], s_l[g][warp] = st.l[g];
  }
  __syncthreads();
  for (int g = 0; g < heads; ++g) write_merged<D>(p, &s_o[g][0][0], s_m[g], s_l[g], b, hq0 + g, chunk);
}

// One block per (sequence, query head): the chunks' partial states merged.
template <int D>
__global__ void __launch_bounds__(D) merge_kernel(const Params p) {
  detail::pdl_enter();  // launched by launch_pdl
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

using GatherKernel = void (*)(Params);

// The instantiation for head_dim d serving `heads` query heads per list (1, 2, 4 or 8 at most).
template <int D>
GatherKernel gather_for(int heads) {
  return heads <= 1 ? gather_kernel<D, 1> : heads <= 2 ? gather_kernel<D, 2> : heads <= 4 ? gather_kernel<D, 4>
                                                                                          : gather_kernel<D, 8>;
}
GatherKernel gather_for(int d, int heads) { return d == 64 ? gather_for<64>(heads) : gather_for<128>(heads); }

// CTAs of the gather kernel for (d, heads) an SM holds, kept per device (plans are made at
// every call, inside graph capture too).
cudaError_t gather_ctas_per_sm(int d, int heads, int& n) {
  static detail::PerDevice<int> kept[2][4];  // [d 64, 128][heads 1, 2, 4, 8]
  const int hi = heads <= 1 ? 0 : heads <= 2 ? 1 : heads <= 4 ? 2 : 3;
  return kept[d == 64 ? 0 : 1][hi].get(n, [d, heads](int, int& per_sm) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gather_for(d, heads), kThreads, 0);
  });
}

struct Plan {
  int heads_per_list = 0, chunks = 1;
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
  plan.heads_per_list = t.lists_per_query_head ? 1 : a.group_size();
  detail::DeviceInfo info;
  int per_sm = 0;
  cudaError_t e = detail::device_info(info);
  if (e == cudaSuccess) e = gather_ctas_per_sm(a.head_dim, plan.heads_per_list, per_sm);
  if (e != cudaSuccess) return e;
  const long lists = std::max(1L, long(t.lists()));
  const long capacity = long(info.sms) * std::max(per_sm, 1);
  const int by_tokens = (std::max(t.max_tokens, 1) + kMinChunkTokens - 1) / kMinChunkTokens;
  plan.chunks = int(std::clamp<long>(std::min<long>(by_tokens, capacity / lists), 1, kMaxChunks));
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
           .heads_per_list = plan.heads_per_list, .chunks = plan.chunks,
           .scale_log2 = a.scale * kLog2e, .part_o = nullptr, .part_lse = nullptr};
  if (plan.chunks > 1) {
    const size_t states = size_t(a.batch) * a.num_heads * plan.chunks;
    p.part_o = static_cast<float*>(a.workspace);
    p.part_lse = reinterpret_cast<float*>(static_cast<char*>(a.workspace) + align_up(states * a.head_dim * 4, 256));
  }
  const dim3 grid(unsigned(plan.chunks), unsigned(t.lists()));
  (void)launch_pdl(gather_for(a.head_dim, plan.heads_per_list), grid, kThreads, 0, stream, p);
  if ((e = cudaGetLastError()) != cudaSuccess || plan.chunks == 1) return e;
  const unsigned rows = unsigned(size_t(a.batch) * a.num_heads);
  if (a.head_dim == 64)
    (void)launch_pdl(merge_kernel<64>, rows, 64, 0, stream, p);
  else
    (void)launch_pdl(merge_kernel<128>, rows, 128, 0, stream, p);
  return cudaGetLastError();
}

}  // namespace skim::cuda
