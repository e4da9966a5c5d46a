// Kernels of paged decode attention (see paged_decode_attention.cuh for the contract). Kept in
// a header so that the benchmark can instantiate tuning variants next to the default one; the
// library's instantiations live in paged_decode_attention.cu.
//
// Work split. A "unit" is one (sequence, KV head) and the query heads of that KV head's
// group (at most 8; larger groups are split into sub-groups, each a unit). make_plan gives
// each unit num_chunks CTAs so that one wave fills the machine. The unit's warps share its
// pages in batches of kBatchPages (statically by rank, or from a counter: see the kernel);
// each warp runs its own online softmax, so warps never wait on each other inside the loop;
// the CTA merges its warps' states at the end and writes one (o, lse) per query head: the
// final result when the unit has a single CTA, else a partial that merge_kernel combines.
//
// Per page and warp (16 tokens of one KV head, K and V 4 KB each at head_dim 128):
//   * cp.async copies K and V into a STAGES-deep ring of shared memory, 16 bytes per copy,
//     rows past the sequence end zero-filled (src-size 0) so no garbage, NaN included, can
//     reach the arithmetic;
//   * S = Q K^T with mma.m16n8k16 (bf16 in, fp32 out): A = the group's queries in rows 0..7
//     (rows 8..15 are zero and never read), B = K straight from shared memory by ldmatrix.
//     q and K are bf16 already, so this loses nothing against fp32 FMAs;
//   * online softmax in the exp2 domain on the accumulator fragment: each quad of lanes
//     holds one query head's 16 scores (4 each), two shuffles give the row max;
//   * O += P V on the tensor cores as well, with P split into bf16 hi + lo parts (two MMAs):
//     P in bf16 alone would cost ~2^-9 relative error per weight, hi+lo keeps ~2^-17, i.e.
//     fp32-class results while the math stays far below the memory time.
// The kernel is bound by HBM: ~150 warp instructions per 8 KB page.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention/paged_decode_args.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/mma_sync.cuh"
#include "backend/cuda/pdl.cuh"

namespace skim::cuda::detail {

constexpr int kPageSize = 16;
constexpr int kMaxRows = 8;        // query heads per CTA: rows 0..7 of the m16 MMA tile
constexpr int kMergeThreads = 256;  // merge_kernel block

// ---------------------------------------------------------------------------------------
// PTX wrappers (sm_80+; griddepcontrol is sm_90 and compiles to nothing below it).

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy that bypasses L1; src_bytes 0 writes zeros without reading.
// (An L2 prefetch-size hint, .L2::128B or 256B, was measured and changed nothing: see
// bench/results/2026-11-23-h100-decode-attention-layouts.md.)
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// c[0..1] += A B for the upper 8 rows of an m16n8k16 bf16 MMA. a_lo / a_hi: this lane's two
// bf16 of row lane/4 at k = 2*(lane%4) and k + 8; rows 8..15 are fed zeros and their
// outputs dropped, so they cost no registers.
__device__ __forceinline__ void mma_rows8(float (&c)[2], uint32_t a_lo, uint32_t a_hi,
                                          uint32_t b0, uint32_t b1) {
  asm volatile(
      "{\n"
      ".reg .f32 z2, z3;\n"  // rows 8..15 of D: written, never read
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,z2,z3}, {%2,%3,%4,%5}, "
      "{%6,%7}, {%8,%9,%10,%11};\n"
      "}\n"
      : "=f"(c[0]), "=f"(c[1])
      : "r"(a_lo), "r"(0u), "r"(a_hi), "r"(0u), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
        "f"(0.0f), "f"(0.0f));
}

// Programmatic dependent launch (pdl.cuh): the split kernel lets the merge kernel start early
// (its launch overlaps our tail); the merge kernel waits for our writes before reading.

// ---------------------------------------------------------------------------------------

struct SplitParams {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* page_table;  // row (b * tables_per_seq + (tables_per_seq > 1 ? kvh : 0))
  const int32_t* seq_lens;    // same index
  const uint32_t* head_masks;  // rows as page_table's (PagedDecodeArgs::head_masks); masked kernel only
  int tables_per_seq;         // 1, or num_kv_heads (PagedDecodeArgs::tables_per_kv_head)
  // Where CTA (b, query head hq, chunk c) writes: o at out_o + (b*H + hq)*o_head_stride
  // + c*D (+ d), lse likewise. Final outputs (stride D, 1) or the partials in the workspace.
  float* out_o;
  float* out_lse;
  int o_head_stride, lse_head_stride;
  uint16_t* out_o_bf16 = nullptr;  // final outputs only (PagedDecodeArgs::o_bf16): bf16 there instead of out_o
  // Dynamic mode: per (sequence, KV unit) two ints {pages handed out, warps done}, zero
  // between calls (the last warp of a unit resets them).
  int* counters;
  bool dynamic;
  int num_heads, num_kv_heads, group, sub_groups;
  int max_pages_per_seq;
  size_t page_stride, head_stride;  // elements (PagedDecodeArgs::page_stride_elems etc.)
  float scale_log2;  // scale * log2(e): scores live in the exp2 domain
  int q_rows = 0;    // PagedDecodeArgs::q_rows (0: row b's own query)
  // PagedDecodeArgs::short_pages: rows from short_from take short_chunks CTAs a unit.
  int short_from = 0x7fffffff, short_chunks = 0;
};

// Pages a warp takes at a time from its unit's pool.
constexpr int kBatchPages = 2;

template <int D, int WARPS, int STAGES>
struct SplitConfig {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(STAGES >= 2, "need at least double buffering");
  static constexpr int kDim = D;
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kRowBytes = D * 2;                  // one token of K or V
  static constexpr int kPageBytes = kPageSize * kRowBytes;  // K (or V) of one page, one head
  static constexpr int kStageBytes = 2 * kPageBytes;
  static constexpr int kWarpBytes = STAGES * kStageBytes;
  static constexpr int kSmemBytes = WARPS * kWarpBytes;
  static constexpr int kChunksPerRow = D / 8;  // 16-byte pieces per row
  static constexpr int kCopiesPerLane = kPageBytes / 16 / 32;
  // After the loop each warp leaves o[kMaxRows][D], m[kMaxRows], l[kMaxRows] in its ring.
  static_assert((kMaxRows * D + 2 * kMaxRows) * 4 <= kWarpBytes, "merge scratch fits the ring");

  // Byte offset of row r's 16-byte piece c in a stage: piece c sits at c ^ (r & 7), so the 8
  // rows an ldmatrix reads (same piece, consecutive rows 256 or 128 bytes apart) hit 8
  // different bank groups.
  __device__ static __forceinline__ uint32_t swz(int r, int c) {
    return uint32_t(r * kRowBytes + ((c ^ (r & 7)) << 4));
  }
};

// The split kernel's steps, in the order it runs them (FlashInfer's decode names the same
// steps load_q, produce_kv, compute_qk, update_mdo_states, compute_sfm_v, merge).

// This lane's A fragments of the CTA's queries, one pair per k-step of 16 dims; rows past the
// CTA's query heads are zero.
template <int D>
__device__ __forceinline__ void load_q_fragments(const SplitParams& p, int b, int hq0, int rows, int row, int quad,
                                                 uint32_t (&qf)[D / 16][2]) {
  const int qb = p.q_rows > 0 ? b % p.q_rows : b;
  const uint16_t* qrow = p.q + (size_t(qb) * p.num_heads + hq0 + row) * D + 2 * quad;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    qf[kk][0] = row < rows ? __ldg(reinterpret_cast<const unsigned int*>(qrow + 16 * kk)) : 0u;
    qf[kk][1] = row < rows ? __ldg(reinterpret_cast<const unsigned int*>(qrow + 16 * kk + 8)) : 0u;
  }
}

// The pages one warp takes from its unit's list. The CTAs of one (sequence, KV unit) share its
// pages: a warp takes kBatchPages consecutive pages at a time. Static mode (deterministic):
// the unit's warps stride through the batches by rank, so every warp gets an even share spread
// over the sequence. Dynamic mode: the first two batches by rank (no waiting at the start),
// later ones from an atomic counter, so warps that the memory system happens to serve faster
// take more pages and all finish closer together. A warp keeps one batch ahead whose ids are
// loading and (dynamic) one counter grab in flight, so neither latency stalls it.
template <bool MASKED>
struct WarpPages {
  static constexpr int K = kBatchPages;
  const int32_t* table;
  const uint32_t* masks;  // MASKED: the list's per-head page masks, loaded beside the ids
  int* ctr;  // dynamic mode: {pages handed out, warps done} of the unit
  int max_pages, total_warps, gw, lane;
  bool dynamic;
  int n_pages = 0;  // set once the sequence length is known (start() does not wait for it)
  int cur_base = 0, nxt_base = 0, cur_ids = 0, nxt_ids = 0;
  uint32_t cur_masks = ~0u, nxt_masks = ~0u;
  int pending = 0;  // lane 0: result of the counter grab in flight
  bool has_pending = false, exhausted = false;
  int static_j = 2, pos = 0;

  // Lane l < K: id of page base + l, loaded speculatively (in bounds of the table row).
  __device__ __forceinline__ int load_ids(int base) const {
    const int pg = base + lane;
    return lane < K && pg < max_pages ? __ldg(table + pg) : 0;
  }
  // Lane l < K: the mask of page base + l (every head when not MASKED).
  __device__ __forceinline__ uint32_t load_masks(int base) const {
    if constexpr (!MASKED) return ~0u;
    const int pg = base + lane;
    return lane < K && pg < max_pages ? __ldg(masks + pg) : 0u;
  }
  // Starts the first two batches' id loads and the first grab, before the length is known.
  __device__ __forceinline__ void start() {
    cur_base = gw * K;
    nxt_base = (total_warps + gw) * K;
    cur_ids = load_ids(cur_base);
    nxt_ids = load_ids(nxt_base);
    cur_masks = load_masks(cur_base);
    nxt_masks = load_masks(nxt_base);
    if (dynamic) {
      if (lane == 0) pending = atomicAdd(ctr, K);
      has_pending = true;
    }
  }
  // The grab just resolved lies past the end: this warp takes no more. The unit's last warp
  // to get here resets the counters for the next call (every other warp has made its last
  // atomicAdd by then).
  __device__ __forceinline__ void finish_grabs() {
    if (lane == 0) {
      __threadfence();  // this warp's grabs are performed before it counts out
      const int old = atomicAdd(ctr + 1, 1);
      if (old == total_warps - 1) {
        atomicExch(ctr, 0);
        atomicExch(ctr + 1, 0);
      }
    }
  }
  __device__ __forceinline__ int next_batch() {
    if (!dynamic) return (static_j++ * total_warps + gw) * K;
    const int base = 2 * total_warps * K + __shfl_sync(0xffffffffu, pending, 0);
    has_pending = false;
    if (base < n_pages) {
      if (lane == 0) pending = atomicAdd(ctr, K);
      has_pending = true;
    } else {
      finish_grabs();
    }
    return base;
  }
  // This warp's next page (its id, index in the sequence and head mask); false once it has
  // no more.
  __device__ __forceinline__ bool next(int& id, int& page, uint32_t& mask) {
    if (exhausted) return false;
    if (pos == K) {
      cur_base = nxt_base;
      cur_ids = nxt_ids;
      cur_masks = nxt_masks;
      pos = 0;
      if (cur_base < n_pages) {
        nxt_base = next_batch();
        nxt_ids = load_ids(nxt_base);
        nxt_masks = load_masks(nxt_base);
      }
    }
    page = cur_base + pos;
    if (page >= n_pages) {  // bases only grow: nothing more for this warp
      exhausted = true;
      if (has_pending) {  // an unused grab (past the end too): count out
        has_pending = false;
        finish_grabs();
      }
      return false;
    }
    id = __shfl_sync(0xffffffffu, cur_ids, pos);
    mask = MASKED ? __shfl_sync(0xffffffffu, cur_masks, pos) : ~0u;
    ++pos;
    return true;
  }
};

// K and V of one page (its first `valid` tokens; the rest zero-filled, so no garbage, NaN
// included, reaches the arithmetic) into the stage at shared address ks (V right after K).
template <class C>
__device__ __forceinline__ void copy_page_async(const uint16_t* kbase, const uint16_t* vbase, size_t off,
                                                int valid, uint32_t ks, int lane) {
  const uint32_t vs = ks + C::kPageBytes;
#pragma unroll
  for (int j = 0; j < C::kCopiesPerLane; ++j) {
    const int idx = lane + 32 * j;
    const int r = idx / C::kChunksPerRow, c = idx % C::kChunksPerRow;
    const bool ok = r < valid;
    const size_t src = off + size_t(ok ? r : 0) * C::kDim + c * 8;
    cp_async16(ks + C::swz(r, c), kbase + src, ok ? 16 : 0);
    cp_async16(vs + C::swz(r, c), vbase + src, ok ? 16 : 0);
  }
}

// S = Q K^T for the page in the stage at ks, scaled into the exp2 domain: two n-tiles of 8
// tokens. ldmatrix x4 gives (tok 0-7, dims lo), (tok 0-7, dims hi), (tok 8-15, lo),
// (tok 8-15, hi): the B fragments of both tiles at once. This lane gets tokens 2q, 2q+1,
// 8+2q, 9+2q of head `row`.
template <class C, int D>
__device__ __forceinline__ void compute_qk(const uint32_t (&qf)[D / 16][2], uint32_t ks, int lane, float scale_log2,
                                           float (&sc)[4]) {
  float s0[2] = {0.0f, 0.0f}, s1[2] = {0.0f, 0.0f};
  const int r = (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t b0, b1, b2, b3;
    ldmatrix_x4(b0, b1, b2, b3, ks + C::swz(r, 2 * kk + ((lane >> 3) & 1)));
    mma_rows8(s0, qf[kk][0], qf[kk][1], b0, b1);
    mma_rows8(s1, qf[kk][0], qf[kk][1], b2, b3);
  }
  sc[0] = s0[0] * scale_log2;
  sc[1] = s0[1] * scale_log2;
  sc[2] = s1[0] * scale_log2;
  sc[3] = s1[1] * scale_log2;
}

// Online softmax over one page's scores: masks tokens past the sequence end (`valid` < 16 on
// its last page; token 0 is always valid), folds the page's max into the running max,
// rescales the running denominator and output, and returns the page's weights in pr.
// MASKED: a page this lane's head does not attend (`attends` false) scores -inf throughout,
// and until the head's first attended page its state stays empty (m_run -inf, weights 0).
template <int D, bool MASKED = false>
__device__ __forceinline__ void update_softmax_state(float (&sc)[4], int valid, bool attends, int quad, float& m_run,
                                                     float& l_run, float (&acc)[D / 8][2], float (&pr)[4]) {
  if constexpr (MASKED) {
    if (!attends) sc[0] = sc[1] = sc[2] = sc[3] = -INFINITY;
  }
  if (valid < kPageSize) {
    const int t0 = 2 * quad;
    if (t0 >= valid) sc[0] = -INFINITY;
    if (t0 + 1 >= valid) sc[1] = -INFINITY;
    if (t0 + 8 >= valid) sc[2] = -INFINITY;
    if (t0 + 9 >= valid) sc[3] = -INFINITY;
  }
  float mx = fmaxf(fmaxf(sc[0], sc[1]), fmaxf(sc[2], sc[3]));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m_run, mx);  // finite unless MASKED: token 0 of the page is valid
  if constexpr (MASKED) {
    if (m_new == -INFINITY) {  // nothing attended yet: the state stays empty
      pr[0] = pr[1] = pr[2] = pr[3] = 0.0f;
      return;
    }
  }
  const float alpha = exp2f(m_run - m_new);
#pragma unroll
  for (int j = 0; j < 4; ++j) pr[j] = exp2f(sc[j] - m_new);
  l_run = l_run * alpha + ((pr[0] + pr[1]) + (pr[2] + pr[3]));
  m_run = m_new;
#pragma unroll
  for (int t = 0; t < D / 8; ++t) {
    acc[t][0] *= alpha;
    acc[t][1] *= alpha;
  }
}

// O += P V for the page in the stage at vs. P's accumulator layout from compute_qk is the A
// layout (no shuffles), split into bf16 hi + lo parts; ldmatrix.trans x4 gives (tok 0-7, dims
// 16np..+7), (tok 8-15, same), (tok 0-7, dims +8..+15), (tok 8-15, same): the B fragments of
// two n-tiles of dims.
template <class C, int D>
__device__ __forceinline__ void compute_pv(const float (&pr)[4], uint32_t vs, int lane, float (&acc)[D / 8][2]) {
  const uint32_t ph_lo = pack_bf16(pr[0], pr[1]), ph_hi = pack_bf16(pr[2], pr[3]);
  const float2 f01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ph_lo));
  const float2 f23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ph_hi));
  const uint32_t pl_lo = pack_bf16(pr[0] - f01.x, pr[1] - f01.y);
  const uint32_t pl_hi = pack_bf16(pr[2] - f23.x, pr[3] - f23.y);
  const int r = (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
  for (int np = 0; np < D / 16; ++np) {
    uint32_t v0, v1, v2, v3;
    ldmatrix_x4_trans(v0, v1, v2, v3, vs + C::swz(r, 2 * np + (lane >> 4)));
    mma_rows8(acc[2 * np], ph_lo, ph_hi, v0, v1);
    mma_rows8(acc[2 * np], pl_lo, pl_hi, v0, v1);
    mma_rows8(acc[2 * np + 1], ph_lo, ph_hi, v2, v3);
    mma_rows8(acc[2 * np + 1], pl_lo, pl_hi, v2, v3);
  }
}

// The warp's unnormalised state (o, m, l per query head) into its own ring.
template <int D>
__device__ __forceinline__ void store_warp_state(float* ws, const float (&acc)[D / 8][2], float m_run, float l_run,
                                                 int row, int quad) {
#pragma unroll
  for (int t = 0; t < D / 8; ++t)
    *reinterpret_cast<float2*>(ws + row * D + 8 * t + 2 * quad) = make_float2(acc[t][0], acc[t][1]);
  if (quad == 0) {
    ws[kMaxRows * D + row] = m_run;
    ws[kMaxRows * D + kMaxRows + row] = l_run;
  }
}

// The CTA's warps' states merged into one (o, lse) per query head, written where the split
// params say (the final output, or this chunk's partial).
template <class C, int D, int WARPS>
__device__ __forceinline__ void merge_warp_states(const unsigned char* smem, const SplitParams& p, int b, int hq0,
                                                  int rows, int chunk) {
  const float* all = reinterpret_cast<const float*>(smem);
  constexpr int kWarpFloats = C::kWarpBytes / 4;
  for (int idx = threadIdx.x; idx < rows * D; idx += C::kThreads) {
    const int h = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, all[w * kWarpFloats + kMaxRows * D + h]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float mw = all[w * kWarpFloats + kMaxRows * D + h];
      if (mw == -INFINITY) continue;  // a warp that saw no page
      const float wt = exp2f(mw - M);
      L += wt * all[w * kWarpFloats + kMaxRows * D + kMaxRows + h];
      O += wt * all[w * kWarpFloats + h * D + d];
    }
    const size_t head = size_t(b) * p.num_heads + hq0 + h;
    const float out = L > 0.0f ? O / L : 0.0f;
    if (p.out_o_bf16)  // a single chunk: the final output
      p.out_o_bf16[head * D + d] = __bfloat16_as_ushort(__float2bfloat16(out));
    else
      p.out_o[head * p.o_head_stride + size_t(chunk) * D + d] = out;
    if (d == 0)
      p.out_lse[head * p.lse_head_stride + chunk] = L > 0.0f ? (M + log2f(L)) * 0.69314718055994531f : -INFINITY;
  }
}

// One CTA: the query heads of one (sequence, KV unit) over its share of the unit's pages
// (see the work split at the top). Each warp streams pages through its ring of STAGES
// stages: copy ahead, then per page S = QK^T, online softmax, O += PV; then the CTA merges
// its warps.
// MASKED: per-head page masks (PagedDecodeArgs::head_masks), a separate instantiation so the
// unmasked kernel's code is unchanged.
template <int D, int WARPS, int STAGES, bool MASKED = false>
__global__ void __launch_bounds__(WARPS * 32) split_kernel(const SplitParams p) {
  using C = SplitConfig<D, WARPS, STAGES>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int stage_valid[WARPS][STAGES];  // tokens of the page in each stage
  __shared__ uint32_t stage_mask[WARPS][MASKED ? STAGES : 1];  // MASKED: the page's head mask

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = lane >> 2, quad = lane & 3;  // MMA fragment coordinates
  const int chunk = blockIdx.x;
  const int kvh = blockIdx.y / p.sub_groups;
  const int g0 = (blockIdx.y % p.sub_groups) * kMaxRows;
  const int rows = min(kMaxRows, p.group - g0);  // query heads of this CTA
  // The last rows first: CTAs are dispatched in block order, and a folded RetroAttention step's
  // past rows (each just before its newest row) have empty lists, whose CTAs took the first
  // wave's slots at batch 1 (retro_decode_args.h). Short rows (from short_from) after all the
  // others: their few pages run on the slots the long rows leave, or after them.
  const int longs = min(p.short_from, int(gridDim.z));
  const int b = int(blockIdx.z) < longs ? longs - 1 - int(blockIdx.z) : int(blockIdx.z);
  const int hq0 = kvh * p.group + g0;
  // A short row's CTAs past those its pages need leave at once, writing nothing (the merge
  // reads the row's first short_chunks partials).
  const int chunks = b >= p.short_from ? p.short_chunks : int(gridDim.x);
  if (chunk >= chunks) return;

  pdl_wait();  // no-op unless this launch itself is a programmatic dependent
  pdl_launch_dependents();

  // Start every independent load before using any: the length, the queries, the page ids
  // (fetched speculatively, so that they do not wait for the length).
  const size_t list = size_t(b) * p.tables_per_seq + (p.tables_per_seq > 1 ? kvh : 0);
  const int len_raw = p.seq_lens[list];
  uint32_t qf[D / 16][2];
  load_q_fragments<D>(p, b, hq0, rows, row, quad, qf);
  WarpPages<MASKED> pages{.table = p.page_table + list * p.max_pages_per_seq,
                          .masks = MASKED ? p.head_masks + list * p.max_pages_per_seq : nullptr,
                  .ctr = p.dynamic ? p.counters + (size_t(b) * gridDim.y + blockIdx.y) * 2 : nullptr,
                  .max_pages = p.max_pages_per_seq,
                  .total_warps = chunks * WARPS,
                  .gw = chunk * WARPS + warp,
                  .lane = lane,
                  .dynamic = p.dynamic};
  pages.start();
  const int len = min(max(len_raw, 0), p.max_pages_per_seq * kPageSize);
  pages.n_pages = (len + kPageSize - 1) / kPageSize;

  unsigned char* wbuf = smem + warp * C::kWarpBytes;
  const uint32_t wbuf_s = smem_addr(wbuf);
  const uint16_t* kbase = p.k + size_t(kvh) * p.head_stride;
  const uint16_t* vbase = p.v + size_t(kvh) * p.head_stride;

  // Copies this warp's next page into stage i % STAGES; always commits a group (maybe empty)
  // so that wait_group counts stay uniform. i counts issue calls, which equal issued pages
  // until the source runs dry.
  int n_issued = 0;
  auto issue = [&](int i) {
    int id, page;
    uint32_t mask;
    if (pages.next(id, page, mask)) {
      ++n_issued;
      const int valid = len - page * kPageSize;  // >= 1
      if (lane == 0) {
        stage_valid[warp][i % STAGES] = valid;
        if constexpr (MASKED) stage_mask[warp][i % STAGES] = mask;
      }
      copy_page_async<C>(kbase, vbase, size_t(id) * p.page_stride, valid, wbuf_s + (i % STAGES) * C::kStageBytes,
                         lane);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < STAGES; ++s) issue(s);

  float m_run = -INFINITY;  // running max of this lane's query head (exp2 domain)
  float l_run = 0.0f;       // this lane's share of the running softmax denominator
  float acc[D / 8][2];      // O fragment: dims 8n + 2*quad + {0,1} of head `row`
#pragma unroll
  for (int t = 0; t < D / 8; ++t) acc[t][0] = acc[t][1] = 0.0f;

  for (int i = 0; i < n_issued; ++i) {
    cp_async_wait<STAGES - 1>();  // page i has landed (for this lane) ...
    __syncwarp();                 // ... and for the whole warp
    const uint32_t ks = wbuf_s + (i % STAGES) * C::kStageBytes;
    float sc[4], pr[4];
    compute_qk<C, D>(qf, ks, lane, p.scale_log2, sc);
    const bool attends = !MASKED || (stage_mask[warp][MASKED ? i % STAGES : 0] >> (g0 + row) & 1u);
    update_softmax_state<D, MASKED>(sc, stage_valid[warp][i % STAGES], attends, quad, m_run, l_run, acc, pr);
    compute_pv<C, D>(pr, ks + C::kPageBytes, lane, acc);
    __syncwarp();  // every lane is done with this stage before it is refilled
    issue(i + STAGES);
  }
  cp_async_wait<0>();

  // The quad's lanes hold disjoint tokens: sum their denominators.
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  __syncwarp();
  store_warp_state<D>(reinterpret_cast<float*>(wbuf), acc, m_run, l_run, row, quad);
  __syncthreads();
  merge_warp_states<C, D, WARPS>(smem, p, b, hq0, rows, chunk);
}

// ---------------------------------------------------------------------------------------

struct MergeParams {
  const float* part_o;    // [batch][num_heads][num_chunks][D]
  const float* part_lse;  // [batch][num_heads][num_chunks]
  int num_heads, num_chunks;
  int part_stride = 0;    // an epilogue of kParts states: unit bh's j-th at bh + j * part_stride (launch_merge)
  // SplitParams::short_from and short_chunks: states from short_state on have short_chunks chunks.
  int short_state = 0x7fffffff, short_chunks = 0;
};

// What the merge does with a merged state: its epilogue. Every thread of the state's block asks
// live (a state no one reads is not merged), then its D / 4 threads (v: the thread's float4 of o)
// call prefetch, both before the merge waits for the split kernel (so they
// may read only what kernels before the split's predecessor wrote: every kernel of the step
// waits for its predecessor before it lets its successor launch, pdl.cuh), then the epilogue
// itself with the merged state and what prefetch returned (every thread has the lse). This one
// writes the state out; retro_merge_state.cuh's RetroMergeEpilogue merges it into RetroAttention's
// caches, whose entries it prefetches. An epilogue may take several states of a unit at once
// (static constexpr int kParts, 1 if absent: merge_parts): the merge's block merges the chunks of
// each, the call's rows being kParts runs of units, and the epilogue gets arrays of kParts float4
// and lse (mac_merge_state.cuh's MacMergePushEpilogue: a row's parts below and above its prefix end).
template <int D>
struct WriteMergedState {
  float* o;
  float* lse;
  uint16_t* o_bf16;  // PagedDecodeArgs::o_bf16: the output as bf16 here instead of o

  struct Prefetched {};
  __device__ __forceinline__ bool live(int) const { return true; }
  __device__ __forceinline__ Prefetched prefetch(int, int) const { return {}; }
  __device__ __forceinline__ void operator()(const Prefetched&, int bh, int v, float4 out, float l) const {
    if (o_bf16) {  // four bf16 in one 8-byte store, each rounded to nearest even
      reinterpret_cast<uint2*>(o_bf16 + size_t(bh) * D)[v] = make_uint2(pack_bf16(out.x, out.y), pack_bf16(out.z, out.w));
    } else {
      reinterpret_cast<float4*>(o + size_t(bh) * D)[v] = out;
    }
    if (v == 0) lse[bh] = l;
  }
};

constexpr int kMaxChunks = 1024;  // make_plan never plans more

template <class Epilogue>
struct MergeParts {
  static constexpr int value = 1;
};
template <class Epilogue>
  requires requires { Epilogue::kParts; }
struct MergeParts<Epilogue> {
  static constexpr int value = Epilogue::kParts;
};
template <class Epilogue>
constexpr int merge_parts = MergeParts<Epilogue>::value;

// The block's max or sum of each of P values, with one pair of barriers for all of them.
template <int P>
__device__ __forceinline__ void block_reduce(float (&v)[P], bool is_max, float (*red)[kMergeThreads / 32]) {
  constexpr int kWarps = kMergeThreads / 32;
#pragma unroll
  for (int j = 0; j < P; ++j)
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) {
      const float o = __shfl_xor_sync(0xffffffffu, v[j], s);
      v[j] = is_max ? fmaxf(v[j], o) : v[j] + o;
    }
  __syncthreads();  // red[] may still be read by an earlier reduction
  if ((threadIdx.x & 31) == 0)
#pragma unroll
    for (int j = 0; j < P; ++j) red[j][threadIdx.x >> 5] = v[j];
  __syncthreads();
#pragma unroll
  for (int j = 0; j < P; ++j) {
    v[j] = red[j][0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v[j] = is_max ? fmaxf(v[j], red[j][w]) : v[j] + red[j][w];
  }
}

// One block per (sequence, query head): lse = log sum_c exp(lse_c), o = sum_c exp(lse_c -
// lse) o_c, the n-way form of merge_state; chunks that saw no key are (o, -inf) and weigh
// nothing. Latency matters here (it runs after the split kernel, on the critical path), so
// every load is issued before it is used: the weights in one pass, then each thread sums
// one float4 of o over its share of the chunks with the loads unrolled. With an epilogue of
// several parts, the block merges each part's state, their loads side by side.
template <int D, class Epilogue>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const MergeParams p, const Epilogue epilogue) {
  constexpr int P = merge_parts<Epilogue>;
  constexpr int kVecs = D / 4;                     // float4 per chunk
  constexpr int kGroups = kMergeThreads / kVecs;   // chunks summed in parallel
  __shared__ float red[P][kMergeThreads / 32];
  __shared__ float weight[P][kMaxChunks];
  __shared__ float4 part[P][kGroups][kVecs];

  const int bh = blockIdx.x, nc = p.num_chunks, t = threadIdx.x;
  if (!epilogue.live(bh)) return;
  typename Epilogue::Prefetched early{};
  if (t < kVecs) early = epilogue.prefetch(bh, t);
  pdl_wait();  // the split kernel's partials are complete and visible after this

  const float* lse_c[P];
  const float4* o_c[P];
  float M[P], L[P];
  int ncj[P], n_all = 0;  // each state's chunks (short rows' fewer), the most of them
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const size_t unit = size_t(bh) + size_t(j) * p.part_stride;
    lse_c[j] = p.part_lse + unit * nc;
    o_c[j] = reinterpret_cast<const float4*>(p.part_o + unit * nc * D);
    M[j] = -INFINITY;
    L[j] = 0.0f;
    ncj[j] = unit >= size_t(p.short_state) ? p.short_chunks : nc;
    n_all = max(n_all, ncj[j]);
  }
  for (int c = t; c < n_all; c += kMergeThreads)
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (c < ncj[j]) M[j] = fmaxf(M[j], lse_c[j][c]);
  block_reduce<P>(M, true, red);
  for (int c = t; c < n_all; c += kMergeThreads)
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float l = c < ncj[j] ? lse_c[j][c] : -INFINITY;
      const float w = l == -INFINITY ? 0.0f : expf(l - M[j]);
      weight[j][c] = w;
      L[j] += w;
    }
  block_reduce<P>(L, false, red);  // its barriers also publish weight[]

  const int v = t % kVecs, g = t / kVecs;
  float4 acc[P];
#pragma unroll
  for (int j = 0; j < P; ++j) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
  for (int c = g; c < n_all; c += kGroups)
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (c < ncj[j]) {
        const float w = weight[j][c];
        const float4 x = o_c[j][size_t(c) * kVecs + v];
        acc[j].x += w * x.x, acc[j].y += w * x.y, acc[j].z += w * x.z, acc[j].w += w * x.w;
      }
#pragma unroll
  for (int j = 0; j < P; ++j) part[j][g][v] = acc[j];
  __syncthreads();
  if (t < kVecs) {
    float4 out[P];
    float lse[P];
#pragma unroll
    for (int j = 0; j < P; ++j) {
      float4 sum = part[j][0][t];
#pragma unroll
      for (int k = 1; k < kGroups; ++k)
        sum.x += part[j][k][t].x, sum.y += part[j][k][t].y, sum.z += part[j][k][t].z, sum.w += part[j][k][t].w;
      const float inv = L[j] > 0.0f ? 1.0f / L[j] : 0.0f;
      out[j] = make_float4(sum.x * inv, sum.y * inv, sum.z * inv, sum.w * inv);
      lse[j] = L[j] > 0.0f ? M[j] + logf(L[j]) : -INFINITY;
    }
    if constexpr (P == 1) epilogue(early, bh, t, out[0], lse[0]);
    else epilogue(early, bh, t, out, lse);
  }
}

// The merge kernel asks for the split kernel's L1/shared split, so that its blocks (launched
// early through PDL) can sit beside split CTAs without the SM reconfiguring between kernels;
// once per device and epilogue.
template <int D, class Epilogue>
cudaError_t prefer_merge_carveout() {
  static PerDevice<Done> done;
  return done.once([](int) {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(merge_kernel<D, Epilogue>),
                                cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  });
}

// Launches merge_kernel over `rows` (batch x num_heads) states, a block per unit of the
// epilogue's parts (rows / kParts units); on Hopper it may start while the split kernel finishes
// (programmatic dependent launch: the kernel waits on its inputs).
template <int D, class Epilogue>
cudaError_t launch_merge(const MergeParams& params, const Epilogue& epilogue, int rows, int cc_major,
                         cudaStream_t stream) {
  constexpr int P = merge_parts<Epilogue>;
  if (rows % P != 0) return cudaErrorInvalidValue;
  if (const cudaError_t e = prefer_merge_carveout<D, Epilogue>(); e != cudaSuccess) return e;
  MergeParams mp = params;
  mp.part_stride = rows / P;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(rows / P);
  cfg.blockDim = dim3(kMergeThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cc_major >= 9 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, merge_kernel<D, Epilogue>, mp, epilogue);
}

// ---------------------------------------------------------------------------------------
// Host side: planning and launching.

struct Plan {
  int sub_groups = 1;
  int num_chunks = 1;   // CTAs per (sequence, KV unit)
  int chunk_pages = 1;  // pages per CTA on average (for reports)
  bool direct = true;
  size_t workspace_bytes = 0;
  int warps = 0, stages = 0;  // of the split kernel that runs it (set by Variant::launch)
};

inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Workspace layout: the page counters first, at a fixed place and size, so that calls of
// any shape on one workspace never see another call's partials where their counters are;
// every split call leaves the counters it used at zero, so the workspace needs zero-filling
// only once after allocation. Then partial o [batch][num_heads][num_chunks][D] fp32 and
// partial lse [batch][num_heads][num_chunks].
constexpr int kMaxUnits = 4096;  // (sequence, KV unit) pairs of a split call
constexpr size_t kCounterBytes = size_t(kMaxUnits) * 2 * 4;
struct WorkspaceLayout {
  size_t o_offset, lse_offset, bytes;
};
inline WorkspaceLayout workspace_layout(const PagedDecodeArgs& a, int num_chunks) {
  const size_t heads = size_t(a.batch) * a.num_heads * num_chunks;
  WorkspaceLayout w;
  w.o_offset = kCounterBytes;
  w.lse_offset = w.o_offset + align_up(heads * a.head_dim * 4, 256);
  w.bytes = w.lse_offset + align_up(heads * 4, 256);
  return w;
}

// The rows the split is planned for (PagedDecodeArgs::split_rows).
inline int split_rows(const PagedDecodeArgs& a) {
  return a.split_rows > 0 ? std::min(a.split_rows, a.batch) : a.batch;
}

// Planned for fewer rows than the batch, the grid holds more CTAs than the machine's slots: at
// most kMaxWaves waves of them, which also bounds the workspace's partial states (planned for one
// row of a 512-row batch, the 8B shape's would have taken 134 MB).
constexpr long kMaxWaves = 4;

inline int max_chunks_for(const PagedDecodeArgs& a, int capacity, int sub_groups) {
  const long units = long(split_rows(a)) * a.num_kv_heads * sub_groups;
  long mc = units > 0 ? std::max<long>(1, capacity / units) : 1;
  const long all = long(a.batch) * a.num_kv_heads * sub_groups;
  if (all > units) mc = std::min(mc, std::max<long>(1, kMaxWaves * capacity / all));
  return int(std::min<long>(mc, kMaxChunks));
}

// CTAs per (sequence, KV unit): fill the machine's resident CTA slots (`capacity`) in one
// wave (with split_rows(a) rows of the longest list), so batch 1 at 8K still keeps every SM
// streaming, but give every CTA at least
// min_chunk_pages of the longest sequence (short sequences: the merge would cost more than
// the spreading gains).
inline Plan make_plan(const PagedDecodeArgs& a, int capacity, int min_chunk_pages) {
  Plan plan;
  plan.sub_groups = (a.group_size() + kMaxRows - 1) / kMaxRows;
  const int max_chunks = max_chunks_for(a, capacity, plan.sub_groups);
  const int pages = (std::max(a.max_seq_len, 1) + kPageSize - 1) / kPageSize;
  int nc = std::min(std::max((pages + min_chunk_pages - 1) / min_chunk_pages, 1), max_chunks);
  if (long(a.batch) * a.num_kv_heads * plan.sub_groups > kMaxUnits) nc = 1;  // > capacity anyway
  plan.num_chunks = nc;
  plan.chunk_pages = (pages + nc - 1) / nc;
  plan.direct = nc == 1;
  plan.workspace_bytes = plan.direct ? 0 : workspace_layout(a, nc).bytes;
  return plan;
}

// Upper bound of make_plan(...).workspace_bytes over all lengths.
inline size_t max_workspace_bytes(const PagedDecodeArgs& a, int capacity) {
  const int sub = (a.group_size() + kMaxRows - 1) / kMaxRows;
  const int mc = max_chunks_for(a, capacity, sub);
  return mc > 1 && long(a.batch) * a.num_kv_heads * sub <= kMaxUnits ? workspace_layout(a, mc).bytes
                                                                      : 0;
}

// A variant of the split kernel: raises its shared-memory limit once per device and reports
// how many of its CTAs one SM holds.
template <int D, int WARPS, int STAGES>
struct Variant {
  using C = SplitConfig<D, WARPS, STAGES>;
  static constexpr int kMinChunkPages = 2 * WARPS;

  static cudaError_t ctas_per_sm(int& out) {
    static PerDevice<int> cache;
    return cache.get(out, [](int, int& n) {
      for (const void* f : {reinterpret_cast<const void*>(split_kernel<D, WARPS, STAGES, false>),
                            reinterpret_cast<const void*>(split_kernel<D, WARPS, STAGES, true>)}) {
        cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
        // The merge kernel asks for the same split (prefer_merge_carveout).
        if (e == cudaSuccess)
          e = cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
        if (e != cudaSuccess) return e;
      }
      const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, split_kernel<D, WARPS, STAGES>,
                                                                          C::kThreads, C::kSmemBytes);
      n = std::max(n, 1);
      return e;
    });
  }

  static cudaError_t capacity(int& cap) {
    DeviceInfo info;
    cudaError_t e = device_info(info);
    if (e != cudaSuccess) return e;
    int per_sm = 0;
    if ((e = ctas_per_sm(per_sm)) != cudaSuccess) return e;
    cap = info.sms * per_sm;
    return cudaSuccess;
  }

  static cudaError_t workspace_size(const PagedDecodeArgs& a, size_t& bytes) {
    int cap = 0;
    cudaError_t e = capacity(cap);
    if (e != cudaSuccess) return e;
    bytes = max_workspace_bytes(a, cap);
    return cudaSuccess;
  }

  // `capacity_override` > 0 replaces the resident-slot count (tuning experiments).
  static cudaError_t plan(const PagedDecodeArgs& a, int capacity_override, Plan& out) {
    int cap = 0;
    const cudaError_t e = capacity(cap);
    if (e != cudaSuccess) return e;
    out = make_plan(a, capacity_override > 0 ? capacity_override : cap, kMinChunkPages);
    out.warps = WARPS;
    out.stages = STAGES;
    return cudaSuccess;
  }

  static cudaError_t launch(const PagedDecodeArgs& a, cudaStream_t stream,
                            int capacity_override = 0, Plan* plan_out = nullptr) {
    return launch_with(a, WriteMergedState<D>{a.o, a.lse, a.o_bf16}, stream, capacity_override, plan_out);
  }

  // With the chunk merge's epilogue (WriteMergedState, or another that takes the merged states);
  // a direct plan (plan_out->direct) writes a.o and a.lse, or a.o_bf16, and runs no epilogue.
  template <class Epilogue>
  static cudaError_t launch_with(const PagedDecodeArgs& a, const Epilogue& epilogue, cudaStream_t stream,
                            int capacity_override = 0, Plan* plan_out = nullptr) {
    if (a.batch == 0) return cudaSuccess;
    DeviceInfo info;
    cudaError_t e = device_info(info);
    if (e != cudaSuccess) return e;
    Plan plan;
    if ((e = Variant::plan(a, capacity_override, plan)) != cudaSuccess) return e;
    if (plan_out) *plan_out = plan;
    if (!plan.direct && (a.workspace == nullptr || a.workspace_bytes < plan.workspace_bytes))
      return cudaErrorInvalidValue;

    int* counters = nullptr;
    float *part_o = nullptr, *part_lse = nullptr;
    if (!plan.direct) {
      const WorkspaceLayout wl = workspace_layout(a, plan.num_chunks);
      char* ws = static_cast<char*>(a.workspace);
      counters = reinterpret_cast<int*>(ws);
      part_o = reinterpret_cast<float*>(ws + wl.o_offset);
      part_lse = reinterpret_cast<float*>(ws + wl.lse_offset);
    }

    SplitParams sp{.q = a.q, .k = a.k_pool, .v = a.v_pool, .page_table = a.page_table,
                         .seq_lens = a.seq_lens, .head_masks = a.head_masks,
                         .tables_per_seq = a.tables_per_kv_head ? a.num_kv_heads : 1,
                         .out_o = plan.direct ? a.o : part_o, .out_lse = plan.direct ? a.lse : part_lse,
                         .o_head_stride = plan.direct ? D : plan.num_chunks * D,
                         .lse_head_stride = plan.direct ? 1 : plan.num_chunks,
                         .out_o_bf16 = plan.direct ? a.o_bf16 : nullptr, .counters = counters,
                         .dynamic = !plan.direct && !a.deterministic, .num_heads = a.num_heads,
                         .num_kv_heads = a.num_kv_heads, .group = a.group_size(), .sub_groups = plan.sub_groups,
                         .max_pages_per_seq = a.max_pages_per_seq, .page_stride = a.page_stride_elems(),
                         .head_stride = a.head_stride_elems(), .scale_log2 = a.scale * 1.4426950408889634f,
                         .q_rows = a.q_rows};
    if (a.short_pages > 0 && a.q_rows > 0 && !plan.direct) {
      sp.short_from = a.q_rows;
      sp.short_chunks = std::min(plan.num_chunks, (a.short_pages + WARPS * kBatchPages - 1) / (WARPS * kBatchPages));
    }

    const dim3 grid(plan.num_chunks, a.num_kv_heads * plan.sub_groups, a.batch);
    // A programmatic dependent of the step's previous kernel: it waits for its inputs first.
    e = a.head_masks ? launch_pdl(split_kernel<D, WARPS, STAGES, true>, grid, C::kThreads, C::kSmemBytes, stream, sp)
                     : launch_pdl(split_kernel<D, WARPS, STAGES, false>, grid, C::kThreads, C::kSmemBytes, stream, sp);
    if (e != cudaSuccess) return e;
    if (plan.direct) return cudaSuccess;

    // The merge as a kernel of its own: the split's last CTA of each unit merging (a fence and an
    // atomic count, then the merge) was slower everywhere, dense b1 32K 51.6 against 50.2 us on
    // the H100 (bench/results/2026-11-28-s30-score-shapes/in-kernel-merge.patch).
    MergeParams mp{.part_o = part_o, .part_lse = part_lse, .num_heads = a.num_heads, .num_chunks = plan.num_chunks};
    if (sp.short_chunks > 0) mp.short_state = sp.short_from * a.num_heads, mp.short_chunks = sp.short_chunks;
    return launch_merge<D>(mp, epilogue, a.batch * a.num_heads, info.cc_major, stream);
  }
};

// What the library runs (paged_decode_attention.cu), chosen with the variant sweeps of
// bench/attention/decode_attention_bench.cu on an H100: 8 warps x 2 stages, and for head_dim
// 128 a third stage once a CTA's chunk is at least kDeepChunkPages long (batch 8 at 32K and
// 128K in the Llama-3.1-8B shapes: 0.7-0.9% faster at 128K in three runs, equal at 32K; at
// batch 1, where chunks are short, 0.3-0.9% slower; bench/results/2026-11-23-h100-tma-fused).
// Both variants hold one CTA per SM, so they plan the same split.
template <int D>
struct DefaultVariant {
  using Shallow = Variant<D, 8, 2>;
  using Deep = Variant<D, 8, 3>;
  static constexpr int kDeepChunkPages = D == 128 ? 1024 : 0;  // 0: never

  static cudaError_t launch(const PagedDecodeArgs& a, cudaStream_t stream,
                            int capacity_override = 0, Plan* plan_out = nullptr) {
    return launch_with(a, WriteMergedState<D>{a.o, a.lse, a.o_bf16}, stream, capacity_override, plan_out);
  }

  template <class Epilogue>
  static cudaError_t launch_with(const PagedDecodeArgs& a, const Epilogue& epilogue, cudaStream_t stream,
                            int capacity_override = 0, Plan* plan_out = nullptr) {
    if (a.batch == 0) return cudaSuccess;
    Plan shallow;
    int deep_per_sm = 0, shallow_per_sm = 0;
    cudaError_t e = Shallow::plan(a, capacity_override, shallow);
    if (e == cudaSuccess && kDeepChunkPages > 0 && shallow.chunk_pages >= kDeepChunkPages &&
        (e = Deep::ctas_per_sm(deep_per_sm)) == cudaSuccess &&
        (e = Shallow::ctas_per_sm(shallow_per_sm)) == cudaSuccess &&
        deep_per_sm == shallow_per_sm)
      return Deep::launch_with(a, epilogue, stream, capacity_override, plan_out);
    return e != cudaSuccess ? e : Shallow::launch_with(a, epilogue, stream, capacity_override, plan_out);
  }

  static cudaError_t workspace_size(const PagedDecodeArgs& a, size_t& bytes) {
    size_t deep = 0;
    cudaError_t e = Shallow::workspace_size(a, bytes);
    if (e == cudaSuccess && kDeepChunkPages > 0 && (e = Deep::workspace_size(a, deep)) == cudaSuccess)
      bytes = std::max(bytes, deep);
    return e;
  }

  static cudaError_t ctas_per_sm(int& n) { return Shallow::ctas_per_sm(n); }
};

// Shapes the kernels accept (device pointers are not checked).
inline bool supported(const PagedDecodeArgs& a) {
  return a.batch >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 &&
         a.num_heads % a.num_kv_heads == 0 && (a.head_dim == 64 || a.head_dim == 128) &&
         a.page_size == kPageSize && a.max_pages_per_seq > 0 && a.max_seq_len >= 0 &&
         a.max_seq_len <= a.max_pages_per_seq * kPageSize &&
         (a.head_masks == nullptr || (a.tables_per_kv_head && a.group_size() <= 32));
}

}  // namespace skim::cuda::detail
