// The forward pass's small kernels (see ops.cuh). Memory-bound and tiny next to the
// projections and attention; written for clarity: one block per row (or row and head). Those of
// a decode step launch as programmatic dependents (pdl.cuh); a failed launch surfaces at the
// pass's next error check, as a <<<>>> launch's does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

#include "backend/cuda/ops.cuh"
#include "backend/cuda/hash_random.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/row_max.cuh"

namespace skim::cuda {

namespace {

__device__ __forceinline__ float bf16_load(const uint16_t* p) {
  return __bfloat162float(__ushort_as_bfloat16(*p));
}
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16(f));  // round to nearest even, as f32_to_bf16
}

// Sum over the block; every thread gets the result. blockDim.x a multiple of 32, <= 1024.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void embed_kernel(const uint16_t* table, const int32_t* tokens, float* x, int hidden) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  const size_t r = blockIdx.x;
  const uint16_t* row = table + size_t(tokens[r]) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[r * hidden + i] = bf16_load(row + i);
}

__global__ void embed_vocab_slice_kernel(const uint16_t* table, const int32_t* tokens, float* x, int hidden,
                                         int vocab_begin, int vocab_rows) {
  const size_t r = blockIdx.x;
  const int t = tokens[r] - vocab_begin;
  const bool mine = t >= 0 && t < vocab_rows;
  const uint16_t* row = table + size_t(mine ? t : 0) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[r * hidden + i] = mine ? bf16_load(row + i) : 0.0f;
}

__global__ void unpack_vocab_slices_kernel(const float* gathered, int n, int stride, int vocab, float* logits) {
  const int rank = blockIdx.y, r = blockIdx.x;
  const int begin = rank * stride, len = min(vocab, begin + stride) - begin;
  const float* from = gathered + (size_t(rank) * n + r) * stride;
  for (int i = threadIdx.x; i < len; i += blockDim.x) logits[size_t(r) * vocab + begin + i] = from[i];
}

__global__ void add_rmsnorm_kernel(float* x, const float* y, const float* w, uint16_t* out, int dim,
                                   float eps) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  float* xr = x + size_t(blockIdx.x) * dim;
  const float* yr = y ? y + size_t(blockIdx.x) * dim : nullptr;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = xr[i];
    if (yr) xr[i] = v = v + yr[i];
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / float(dim) + eps);
  uint16_t* o = out + size_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = bf16_bits(w[i] * (xr[i] * inv));
}

// add_rmsnorm_kernel for rows of dim % 4 == 0 and dim <= 4 x 4 x blockDim.x: each thread keeps
// its (at most four) float4s of the row in registers between the sum and the scaling, so x is
// read once; 16-byte loads and 8-byte stores. The elements as add_rmsnorm_kernel computes them;
// the sum of squares in another order (each thread's four first).
constexpr int kRmsVectors = 4;
__global__ void add_rmsnorm_vec_kernel(float* x, const float* y, const float* w, uint16_t* out, int dim, float eps) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  const int d4 = dim / 4;
  float4* xr = reinterpret_cast<float4*>(x + size_t(blockIdx.x) * dim);
  const float4* yr = y ? reinterpret_cast<const float4*>(y + size_t(blockIdx.x) * dim) : nullptr;
  float4 v[kRmsVectors];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kRmsVectors; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i >= d4) break;
    float4 a = xr[i];
    if (yr) {
      const float4 b = yr[i];
      a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
      xr[i] = a;
    }
    v[k] = a;
    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
  }
  const float inv = rsqrtf(block_sum(ss) / float(dim) + eps);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  uint2* o = reinterpret_cast<uint2*>(out + size_t(blockIdx.x) * dim);
#pragma unroll
  for (int k = 0; k < kRmsVectors; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i >= d4) break;
    const float4 ww = w4[i], a = v[k];
    o[i] = make_uint2(uint32_t(bf16_bits(ww.x * (a.x * inv))) | uint32_t(bf16_bits(ww.y * (a.y * inv))) << 16,
                      uint32_t(bf16_bits(ww.z * (a.z * inv))) | uint32_t(bf16_bits(ww.w * (a.w * inv))) << 16);
  }
}

__global__ void gather_rows_kernel(const uint16_t* in, const int32_t* rows, uint16_t* out, int dim) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  const uint16_t* src = in + size_t(rows[blockIdx.x]) * dim;
  uint16_t* dst = out + size_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// Heads a block of qkv_rope_append_kernel takes: blocks of 128 (d = 64) or 256 threads (d =
// 128), a quarter of the blocks one head a block made (a 32K prefill's 2048-row chunks were 82K
// blocks of 64 threads, 0.1 ms a layer for 70 MB: ncu, H100, 2026-11-26).
constexpr int kRopeHeadsPerBlock = 4;

// Sum over the threads of one head (`half` of them, 32 or 64: one warp or two), as block_sum
// adds (a warp's tree, then warp 0's part plus warp 1's): every thread of the block calls it.
__device__ float head_sum(float v, int sub, int half) {
  __shared__ float partial[kRopeHeadsPerBlock][2];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (half == 32) return v;
  if (threadIdx.x % 32 == 0) partial[sub][(threadIdx.x % half) / 32] = v;
  __syncthreads();
  return partial[sub][0] + partial[sub][1];
}

// Block (row, group of kRopeHeadsPerBlock heads): heads [0, H) are query heads, [H, H + KVH) key
// heads (which also move their value head). Thread t holds head t / (d/2) of the group and its
// RoPE pair (i, i + d/2), i = t % (d/2).
__global__ void qkv_rope_append_kernel(QkvRopeAppendArgs a) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  const int half = a.head_dim / 2, sub = threadIdx.x / half, i = threadIdx.x % half, r = blockIdx.x;
  const int head = blockIdx.y * kRopeHeadsPerBlock + sub;
  const bool active = head < a.num_heads + (a.k_pool ? a.num_kv_heads : 0);  // no pools: q alone
  const bool is_q = head < a.num_heads;
  const int q_dim = a.num_heads * a.head_dim, kv_dim = a.num_kv_heads * a.head_dim;
  const int kvh = is_q ? 0 : head - a.num_heads;
  const int col = is_q ? head * a.head_dim : q_dim + kvh * a.head_dim;
  const float* row = a.qkv + size_t(r) * (a.k_pool ? q_dim + 2 * kv_dim : q_dim);

  float x0 = active ? row[col + i] : 0.0f, x1 = active ? row[col + i + half] : 0.0f;
  if (a.bias && active) x0 += a.bias[col + i], x1 += a.bias[col + i + half];
  const float* norm = is_q ? a.q_norm : a.k_norm;
  if (a.q_norm || a.k_norm) {  // the same for every thread: head_sum syncs the block
    const float inv = rsqrtf(head_sum(x0 * x0 + x1 * x1, sub, half) / float(a.head_dim) + a.eps);
    if (norm) {
      x0 = norm[i] * (x0 * inv);
      x1 = norm[i + half] * (x1 * inv);
    }
  }
  if (!active) return;
  const int pos = a.positions[r];
  float s, c;
  sincosf(float(pos) * a.inv_freq[i], &s, &c);
  const float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;

  if (is_q) {
    if (a.q_pre) {
      uint16_t* qp = a.q_pre + (size_t(r) * a.num_heads + head) * a.head_dim;
      qp[i] = bf16_bits(x0);
      qp[i + half] = bf16_bits(x1);
    }
    uint16_t* q = a.q + (size_t(r) * a.num_heads + head) * a.head_dim;
    q[i] = bf16_bits(y0);
    q[i + half] = bf16_bits(y1);
    return;
  }
  const int page = a.page_table[size_t(r) * a.max_pages_per_seq + pos / a.page_size];
  const size_t at = ((size_t(page) * a.num_kv_heads + kvh) * a.page_size + pos % a.page_size) * a.head_dim;
  a.k_pool[at + i] = bf16_bits(y0);
  a.k_pool[at + i + half] = bf16_bits(y1);
  const int vcol = q_dim + kv_dim + kvh * a.head_dim;
  float v0 = row[vcol + i], v1 = row[vcol + i + half];
  if (a.bias) v0 += a.bias[vcol + i], v1 += a.bias[vcol + i + half];
  a.v_pool[at + i] = bf16_bits(v0);
  a.v_pool[at + i + half] = bf16_bits(v1);
}

// The page size whose digest loads are unrolled (the GPU cache's).
constexpr int kDigestPage = 16;

__global__ void page_digest_kernel(const uint16_t* k_pool, uint16_t* kmin, uint16_t* kmax,
                                   const int32_t* positions, const int32_t* page_table, int max_pages,
                                   int n, int num_kv_heads, int d, int page_size) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  const int r = blockIdx.x, h = blockIdx.y;
  const int pos = positions[r];
  const int page = page_table[size_t(r) * max_pages + pos / page_size];
  if (r + 1 < n) {  // a later row of this batch writes the same page: it recomputes
    const int next = positions[r + 1];
    if (page_table[size_t(r + 1) * max_pages + next / page_size] == page) return;
  }
  const size_t base = (size_t(page) * num_kv_heads + h);
  const uint16_t* k = k_pool + base * page_size * d;
  const int last = pos % page_size;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    if (page_size == kDigestPage) {  // every row's load issued before the first is used (a decode step waits on it)
      float v[kDigestPage];
#pragma unroll
      for (int t = 0; t < kDigestPage; ++t) v[t] = t <= last ? bf16_load(k + size_t(t) * d + i) : 0.0f;
#pragma unroll
      for (int t = 0; t < kDigestPage; ++t)
        if (t <= last) mn = fminf(mn, v[t]), mx = fmaxf(mx, v[t]);
    } else {
      for (int t = 0; t <= last; ++t) {
        const float v = bf16_load(k + size_t(t) * d + i);
        mn = fminf(mn, v);
        mx = fmaxf(mx, v);
      }
    }
    kmin[base * d + i] = bf16_bits(mn);  // exact: the min and max of bf16 keys are bf16 values
    kmax[base * d + i] = bf16_bits(mx);
  }
}

__device__ __forceinline__ float silu_times(float x, float up) { return x / (1.0f + __expf(-x)) * up; }

// Block (row, slice): a decode row spreads over several SMs. Four elements a thread with 16-byte
// loads and an 8-byte store where I % 4 == 0 (a prefill chunk's rows are 235 MB of fp32 at the 8B
// shape: scalar loads and 2-byte stores ran at about 2 TB/s), each element computed as alone.
__global__ void silu_mul_kernel(const float* gate_up, uint16_t* out, int I) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  const float* g = gate_up + size_t(blockIdx.x) * 2 * I;
  uint16_t* o = out + size_t(blockIdx.x) * I;
  const int first = blockIdx.y * blockDim.x + threadIdx.x, stride = gridDim.y * blockDim.x;
  if (I % 4 == 0) {
    for (int i = first; i < I / 4; i += stride) {
      const float4 x = reinterpret_cast<const float4*>(g)[i], up = reinterpret_cast<const float4*>(g + I)[i];
      const uint32_t lo = uint32_t(bf16_bits(silu_times(x.x, up.x))) | uint32_t(bf16_bits(silu_times(x.y, up.y))) << 16;
      const uint32_t hi = uint32_t(bf16_bits(silu_times(x.z, up.z))) | uint32_t(bf16_bits(silu_times(x.w, up.w))) << 16;
      reinterpret_cast<uint2*>(o)[i] = make_uint2(lo, hi);
    }
    return;
  }
  for (int i = first; i < I; i += stride) o[i] = bf16_bits(silu_times(g[i], g[I + i]));
}

__global__ void to_bf16_kernel(const float* in, uint16_t* out, size_t count) {
  detail::pdl_enter();  // launched by launch_pdl: its inputs are the previous kernels'
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = bf16_bits(in[i]);
}

__global__ void argmax_kernel(const float* logits, int vocab, int32_t* next, DecodeState st, bool advance) {
  const float* row = logits + size_t(blockIdx.x) * vocab;
  float best;
  int idx;  // vocab for a row of NaNs or -inf: token 0 below
  thread_row_max(row, vocab, best, idx);
  __shared__ float sv[32];
  __shared__ int si[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > best || (ov == best && oi < idx)) best = ov, idx = oi;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sv[warp] = best, si[warp] = idx;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < int(blockDim.x / 32); ++w)
    if (sv[w] > best || (sv[w] == best && si[w] < idx)) best = sv[w], idx = si[w];
  if (idx >= vocab) idx = 0;
  next[blockIdx.x] = idx;
  if (advance) {
    st.tokens[blockIdx.x] = idx;
    st.positions[blockIdx.x] += 1;
    st.seq_lens[blockIdx.x] += 1;
  }
}

__global__ void fill_random_bf16_kernel(uint16_t* p, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const double u = draw_unit(seed, i);
    p[i] = bf16_bits(float((2.0 * u - 1.0) * scale));
  }
}

__global__ void fill_random_digests_kernel(uint16_t* kmin, uint16_t* kmax, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const double u = draw_unit(seed, 2 * i), w = draw_unit(seed, 2 * i + 1);
    const float x = float((2.0 * u - 1.0) * scale), y = float((2.0 * w - 1.0) * scale);
    kmin[i] = bf16_bits(fminf(x, y));
    kmax[i] = bf16_bits(fmaxf(x, y));
  }
}

__device__ uint64_t gcd_u64(uint64_t a, uint64_t b) {
  while (b != 0) {
    const uint64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

__global__ void fill_random_cs_lists_kernel(int32_t* index, uint16_t* score, size_t lists, int L, int context,
                                            uint64_t seed) {
  const size_t count = lists * size_t(L);
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < count; e += size_t(gridDim.x) * blockDim.x) {
    const size_t list = e / L, i = e % L;
    // A step coprime to the context makes i -> (step i + offset) mod context one-to-one.
    uint64_t step = 1 + 2 * (splitmix64(seed + 2 * list) % uint64_t(context));
    while (gcd_u64(step, uint64_t(context)) != 1) step += 2;
    const uint64_t offset = splitmix64(seed + 2 * list + 1) % uint64_t(context);
    index[e] = int32_t((step * i + offset) % uint64_t(context));
    const double u = draw_unit(seed, e);
    score[e] = __half_as_ushort(__float2half_rn(float(2.0 * u - 1.0)));
  }
}

__global__ void fill_random_f32_kernel(float* p, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const double u = draw_unit(seed, i);
    p[i] = float((2.0 * u - 1.0) * scale);
  }
}

__global__ void fill_f32_kernel(float* p, size_t count, float value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    p[i] = value;
}

unsigned grid_for(size_t count) {
  const size_t blocks = (count + 255) / 256;
  return unsigned(blocks < 8192 ? (blocks > 0 ? blocks : 1) : 8192);
}

}  // namespace

void embed(const uint16_t* table, const int32_t* tokens, float* x, int n, int hidden, cudaStream_t s) {
  if (n > 0) (void)launch_pdl(embed_kernel, n, 256, 0, s, table, tokens, x, hidden);
}

void embed_vocab_slice(const uint16_t* table, const int32_t* tokens, float* x, int n, int hidden, int vocab_begin,
                       int vocab_rows, cudaStream_t s) {
  if (n > 0) embed_vocab_slice_kernel<<<n, 256, 0, s>>>(table, tokens, x, hidden, vocab_begin, vocab_rows);
}

void unpack_vocab_slices(const float* gathered, int ranks, int n, int stride, int vocab, float* logits,
                         cudaStream_t s) {
  if (n > 0 && ranks > 0) unpack_vocab_slices_kernel<<<dim3(n, ranks), 256, 0, s>>>(gathered, n, stride, vocab, logits);
}

void add_rmsnorm(float* x, const float* y, const float* w, uint16_t* out, int n, int dim, float eps,
                 cudaStream_t s) {
  // One block per row; wide rows get more threads (a decode step has a single row). Rows of
  // dim % 4 == 0 up to 4096 on 256 threads (a 1024-thread block took 5.5 us a call in a
  // decode step of the 8B shape: ncu, H100, 2026-11-27), up to 16384 on 1024, four float4s a
  // thread at most.
  if (n == 0) return;
  if (dim % 4 == 0 && dim <= 4 * kRmsVectors * 1024) {
    const int threads = dim <= 4 * kRmsVectors * 256 ? 256 : 1024;
    (void)launch_pdl(add_rmsnorm_vec_kernel, n, threads, 0, s, x, y, w, out, dim, eps);
    return;
  }
  (void)launch_pdl(add_rmsnorm_kernel, n, dim >= 2048 ? 1024 : 256, 0, s, x, y, w, out, dim, eps);
}

void gather_rows(const uint16_t* in, const int32_t* rows, uint16_t* out, int n, int dim, cudaStream_t s) {
  if (n > 0) (void)launch_pdl(gather_rows_kernel, n, 256, 0, s, in, rows, out, dim);
}

void qkv_rope_append(const QkvRopeAppendArgs& a, cudaStream_t s) {
  if (a.n == 0) return;
  // head_dim / 2 threads, rounded up to whole warps for the block reduction (head_dim 64, 128).
  const int heads = a.num_heads + (a.k_pool ? a.num_kv_heads : 0);
  const int groups = (heads + kRopeHeadsPerBlock - 1) / kRopeHeadsPerBlock;
  (void)launch_pdl(qkv_rope_append_kernel, dim3(a.n, groups), kRopeHeadsPerBlock * a.head_dim / 2, 0, s, a);
}

void page_digest(const uint16_t* k_pool, uint16_t* kmin, uint16_t* kmax, const int32_t* positions,
                 const int32_t* page_table, int max_pages, int n, int num_kv_heads, int head_dim,
                 int page_size, cudaStream_t s) {
  if (n == 0) return;
  (void)launch_pdl(page_digest_kernel, dim3(n, num_kv_heads), head_dim, 0, s, k_pool, kmin, kmax, positions, page_table,
                   max_pages, n, num_kv_heads, head_dim, page_size);
}

void silu_mul(const float* gate_up, uint16_t* out, int n, int I, cudaStream_t s) {
  // A block's 256 threads take 4 x 256 elements a pass where I % 4 == 0 (the slices as before).
  if (n > 0) (void)launch_pdl(silu_mul_kernel, dim3(n, (I + 1023) / 1024), 256, 0, s, gate_up, out, I);
}

void to_bf16(const float* in, uint16_t* out, size_t count, cudaStream_t s) {
  if (count > 0) (void)launch_pdl(to_bf16_kernel, grid_for(count), 256, 0, s, in, out, count);
}

void argmax(const float* logits, int n, int vocab, int32_t* next, const DecodeState* advance, cudaStream_t s) {
  if (n == 0) return;
  argmax_kernel<<<n, 1024, 0, s>>>(logits, vocab, next, advance ? *advance : DecodeState{}, advance != nullptr);
}

void fill_random_bf16(uint16_t* p, size_t count, uint64_t seed, float scale, cudaStream_t s) {
  if (count > 0) fill_random_bf16_kernel<<<grid_for(count), 256, 0, s>>>(p, count, seed, scale);
}

void fill_random_cs_lists(int32_t* index, uint16_t* score, size_t lists, int L, int context, uint64_t seed,
                          cudaStream_t s) {
  if (lists > 0 && L > 0)
    fill_random_cs_lists_kernel<<<grid_for(lists * size_t(L)), 256, 0, s>>>(index, score, lists, L, context, seed);
}

void fill_random_digests(uint16_t* kmin, uint16_t* kmax, size_t count, uint64_t seed, float scale, cudaStream_t s) {
  if (count > 0) fill_random_digests_kernel<<<grid_for(count), 256, 0, s>>>(kmin, kmax, count, seed, scale);
}

void fill_random_f32(float* p, size_t count, uint64_t seed, float scale, cudaStream_t s) {
  if (count > 0) fill_random_f32_kernel<<<grid_for(count), 256, 0, s>>>(p, count, seed, scale);
}

void fill_f32(float* p, size_t count, float value, cudaStream_t s) {
  if (count > 0) fill_f32_kernel<<<grid_for(count), 256, 0, s>>>(p, count, value);
}

}  // namespace skim::cuda
