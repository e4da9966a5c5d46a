// Kernels of paged decode attention (see paged_decode_attention.cuh for the contract). Kept in
// a header so that the benchmark can instantiate tuning variants next to the default one; the
// library's instantiations live in paged_decode_attention.cu.
//
// Work split (one kernel, no separate merge pass). A "unit" is one (sequence, KV head) and the
// query heads of that KV head's GQA group (at most 8; larger groups are split into
// sub-groups, each a unit). Every unit is planned with P pages (P = pages of max_seq_len), so
// the call's work is the flat range [0, U*P) of (unit, page) pairs. make_plan cuts that range
// into G equal pieces, one CTA each, with G the number of CTAs the machine holds at once (all
// SMs start together and, having equal shares, finish together) unless the work is too small
// to be worth spreading. While U <= G a piece is at most P pages long, so a CTA's piece covers
// the end of one unit and perhaps the start of the next: at most two "segments".
//
// Inside a CTA the warps share each segment's pages in interleaved batches of kBatchPages;
// each warp runs its own online softmax per segment (two register states), so warps never
// wait on each other inside the loop. At the end the CTA merges its warps' states per
// segment. A unit covered by one CTA is written out directly. Otherwise the CTA writes a
// partial state (o, lse) into the workspace and counts itself in on the unit's counter; the
// CTA that arrives last (the classic threadfence-reduction pattern: partial stores, fence,
// atomic) merges all partials of the unit, writes the result and resets the counter. That
// replaces the former merge kernel and its launch gap with one L2 round trip in one CTA.
// The assignment of pages and the merge order are fixed, so results are bitwise
// reproducible whichever CTA arrives last.
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

namespace skim::cuda::detail {

constexpr int kPageSize = 16;
constexpr int kMaxRows = 8;  // query heads per unit: rows 0..7 of the m16 MMA tile

// ---------------------------------------------------------------------------------------
// PTX wrappers (sm_80+; griddepcontrol is sm_90 and compiles to nothing below it).

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy that bypasses L1; src_bytes 0 writes zeros without reading.
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

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

// Programmatic dependent launch (sm_90): the split kernel lets the merge kernel start early
// (its launch overlaps our tail); the merge kernel waits for our writes before reading.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------

struct SplitParams {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* page_table;
  const int32_t* seq_lens;
  float* o;    // final outputs [batch][num_heads][D], lse [batch][num_heads]
  float* lse;
  // Workspace (unused when every unit has one CTA): per unit `slots` partial states, each
  // o[kMaxRows][D] (normalised) and lse[kMaxRows] (log2 domain), and one arrival counter.
  float* part_o;
  float* part_lse;
  int* counters;
  int slots;
  int num_heads, num_kv_heads, group, sub_groups;
  int max_pages_per_seq;
  int unit_pages;          // P: pages planned per unit
  int num_ctas;            // G: the flat range is cut into this many pieces
  long long total_pages;   // U * P
  float scale_log2;        // scale * log2(e): scores live in the exp2 domain
};

// Pages a warp takes at a time from its segment.
constexpr int kBatchPages = 2;

template <int D, int WARPS, int STAGES>
struct SplitConfig {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(STAGES >= 2, "need at least double buffering");
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kRowBytes = D * 2;                  // one token of K or V
  static constexpr int kPageBytes = kPageSize * kRowBytes;  // K (or V) of one page, one head
  static constexpr int kStageBytes = 2 * kPageBytes;
  static constexpr int kWarpBytes = STAGES * kStageBytes;
  static constexpr int kChunksPerRow = D / 8;  // 16-byte pieces per row
  static constexpr int kCopiesPerLane = kPageBytes / 16 / 32;
  // A warp's softmax state: o[kMaxRows][D], m[kMaxRows], l[kMaxRows] (unnormalised). Segment
  // A's is parked in shared memory when the warp moves on to segment B (registers would
  // spill); segment B's goes into the warp's ring after the loop.
  static constexpr int kStateFloats = kMaxRows * D + 2 * kMaxRows;
  static constexpr int kStateBytes = kStateFloats * 4;
  static_assert(kStateBytes <= kWarpBytes, "merge scratch fits the ring");
  // Shared memory: the rings, the parked states, the queries of both segments (bf16).
  static constexpr int kRingOffset = 0;
  static constexpr int kParkOffset = WARPS * kWarpBytes;
  static constexpr int kQOffset = kParkOffset + WARPS * kStateBytes;
  static constexpr int kQBytes = 2 * kMaxRows * D * 2;
  static constexpr int kSmemBytes = kQOffset + kQBytes;
};

// The CTA whose piece of the flat range [0, T) holds position f, when the range is cut into
// G pieces [floor(c T / G), floor((c + 1) T / G)).
__host__ __device__ inline int cta_of(long long f, long long T, int G) {
  return int(((f + 1) * G - 1) / T);
}

// What a CTA knows about one unit it works on.
struct Segment {
  int unit = -1;       // -1: none
  int b = 0;           // sequence
  int kvh = 0;         // KV head
  int hq0 = 0;         // first query head
  int rows = 0;        // query heads (<= kMaxRows)
  int pg0 = 0, pg1 = 0;  // this CTA's planned pages of the unit: [pg0, pg1)
  int chunk = 0;       // this CTA's index among the unit's CTAs
  int chunks = 1;      // how many CTAs cover the unit
};

__device__ __forceinline__ Segment make_segment(const SplitParams& p, int u, int pg0, int pg1) {
  Segment s;
  const int per_seq = p.num_kv_heads * p.sub_groups;
  s.unit = u;
  s.b = u / per_seq;
  const int y = u % per_seq;
  s.kvh = y / p.sub_groups;
  const int g0 = (y % p.sub_groups) * kMaxRows;
  s.rows = min(kMaxRows, p.group - g0);
  s.hq0 = s.kvh * p.group + g0;
  s.pg0 = pg0;
  s.pg1 = pg1;
  const long long first = (long long)u * p.unit_pages;
  const int c_first = cta_of(first, p.total_pages, p.num_ctas);
  s.chunk = int(blockIdx.x) - c_first;
  s.chunks = cta_of(first + p.unit_pages - 1, p.total_pages, p.num_ctas) - c_first + 1;
  return s;
}

// Pages warp w of WARPS takes from a segment of n pages dealt out in batches of K.
template <int WARPS>
__device__ __forceinline__ int warp_share(int n, int w) {
  constexpr int K = kBatchPages;
  return (n / (K * WARPS)) * K + min(max(n % (K * WARPS) - w * K, 0), K);
}
// The segment-relative page of the warp's i-th page.
template <int WARPS>
__device__ __forceinline__ int warp_page(int i, int w) {
  constexpr int K = kBatchPages;
  return ((i / K) * WARPS + w) * K + i % K;
}

template <int D, int WARPS, int STAGES>
__global__ void __launch_bounds__(WARPS * 32) split_kernel(const SplitParams p) {
  using C = SplitConfig<D, WARPS, STAGES>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int stage_info[WARPS][STAGES];  // valid tokens of the page in each stage | seg << 5
  __shared__ int is_last[2];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = lane >> 2, quad = lane & 3;  // MMA fragment coordinates

  // This CTA's piece of the flat (unit, page) range, and the (at most two) segments in it.
  const long long T = p.total_pages;
  const int P = p.unit_pages;
  const long long f0 = (long long)blockIdx.x * T / p.num_ctas;
  const long long f1 = ((long long)blockIdx.x + 1) * T / p.num_ctas;
  const int u0 = int(f0 / P);
  const long long ub = (long long)(u0 + 1) * P;  // first position of the next unit
  const Segment sa = make_segment(p, u0, int(f0 - (long long)u0 * P), int(min(f1, ub) - (long long)u0 * P));
  const bool has_b = f1 > ub;
  const Segment sb = has_b ? make_segment(p, u0 + 1, 0, int(f1 - ub)) : Segment{};

  pdl_wait();  // no-op unless this launch itself is a programmatic dependent
  pdl_launch_dependents();

  // Start every independent load before using any: the lengths, the queries, the page ids.
  // The page ids are fetched speculatively for the planned pages (in bounds of the table
  // row), so that this load does not wait for seq_lens.
  const int len_a_raw = p.seq_lens[sa.b];
  const int len_b_raw = has_b ? p.seq_lens[sb.b] : 0;

  // The queries of both segments go to shared memory (one 16-byte load per thread), so
  // that a warp holds only the fragments of the segment it is processing.
  constexpr int kQVecs = 2 * kMaxRows * D / 8;
  uint4 qv[(kQVecs + C::kThreads - 1) / C::kThreads];
#pragma unroll
  for (int j = 0; j < (kQVecs + C::kThreads - 1) / C::kThreads; ++j) {
    const int idx = threadIdx.x + j * C::kThreads;
    const int seg = idx / (kMaxRows * D / 8), r = idx / (D / 8) % kMaxRows, c = idx % (D / 8);
    // (fields picked one by one: a runtime choice between the two structs would put them
    // in local memory)
    const int unit = seg ? sb.unit : sa.unit, rows = seg ? sb.rows : sa.rows;
    const int b = seg ? sb.b : sa.b, hq0 = seg ? sb.hq0 : sa.hq0;
    const bool ok = idx < kQVecs && unit >= 0 && r < rows;
    qv[j] = ok ? __ldg(reinterpret_cast<const uint4*>(p.q + (size_t(b) * p.num_heads + hq0 + r) * D) + c)
               : make_uint4(0u, 0u, 0u, 0u);
  }

  // The warp's page stream. The piece's R pages (A's ra, then B's) are dealt to the warps
  // in batches of kBatchPages as one sequence, so every warp gets the same share whatever
  // the boundary (dealt per segment, the warps that get a batch of both segments would
  // carry up to two batches more than the others, and at batch 1 the call waits for them).
  // Planned index i: position warp_page(i) of the piece. Planned shares index the page ids
  // (fetched speculatively); the valid ones (pages below the sequence's length) are read.
  const int R = int(f1 - f0);
  const int ra = sa.pg1 - sa.pg0;                 // pages of A in the piece
  const int n_plan = warp_share<WARPS>(R, warp);  // planned pages of this warp
  const int ia = warp_share<WARPS>(ra, warp);     // its first planned index in B
  const int32_t* table_a = p.page_table + size_t(sa.b) * p.max_pages_per_seq + sa.pg0;
  const int32_t* table_b = p.page_table + size_t(sb.b) * p.max_pages_per_seq;
  // Lane l holds the id of the warp's planned page 32 * blk + l.
  auto load_ids = [&](int blk) {
    const int i = blk * 32 + lane;
    if (i >= n_plan) return 0;
    const int t = warp_page<WARPS>(i, warp);
    return __ldg(t < ra ? table_a + t : table_b + (t - ra));
  };
  int ids_blk = 0;
  int ids_cur = load_ids(0);
  int ids_nxt = load_ids(1);
  // Warp-uniform i: the id of planned page i; moves the id window forward (and prefetches
  // the block after it) when i leaves it. Only a jump over a whole block (a sequence much
  // shorter than planned) waits for a load.
  auto id_of = [&](int i) {
    const int blk = i >> 5;
    if (blk != ids_blk) {
      ids_cur = blk == ids_blk + 1 ? ids_nxt : load_ids(blk);
      ids_blk = blk;
      ids_nxt = load_ids(blk + 1);
    }
    return __shfl_sync(0xffffffffu, ids_cur, i & 31);
  };

  // Valid positions: A's below its sequence's end (ea), B's below ra + B's length (eb).
  // Positions grow with i, so the valid stream is planned indices [0, va) then [ia, ia + vb).
  const int cap = p.max_pages_per_seq * kPageSize;
  const int len_a = min(max(len_a_raw, 0), cap);
  const int len_b = min(max(len_b_raw, 0), cap);
  const int ea = min(max((len_a + kPageSize - 1) / kPageSize - sa.pg0, 0), ra);
  const int eb = has_b ? ra + min((len_b + kPageSize - 1) / kPageSize, R - ra) : ra;
  const int va = warp_share<WARPS>(ea, warp);
  const int vb = warp_share<WARPS>(eb, warp) - ia;
  const int n_total = va + vb;

  unsigned char* wbuf = smem + warp * C::kWarpBytes;
  const uint32_t wbuf_s = smem_addr(wbuf);
  const size_t page_stride = size_t(p.num_kv_heads) * kPageSize * D;  // elements
  const uint16_t* kbase_a = p.k + size_t(sa.kvh) * kPageSize * D;
  const uint16_t* vbase_a = p.v + size_t(sa.kvh) * kPageSize * D;
  const uint16_t* kbase_b = p.k + size_t(sb.kvh) * kPageSize * D;
  const uint16_t* vbase_b = p.v + size_t(sb.kvh) * kPageSize * D;

  // Row r's 16-byte piece c sits at piece c ^ (r & 7): the 8 rows an ldmatrix reads (same
  // piece, consecutive rows 256 or 128 bytes apart) then hit 8 different bank groups.
  auto swz = [](int r, int c) { return uint32_t(r * C::kRowBytes + ((c ^ (r & 7)) << 4)); };

  // Copies the warp's i-th valid page into stage i % STAGES; always commits a group (maybe
  // empty) so that wait_group counts stay uniform.
  auto issue = [&](int i) {
    if (i < n_total) {
      const bool seg_b = i >= va;
      const int ip = seg_b ? ia + (i - va) : i;  // planned index
      const int t = warp_page<WARPS>(ip, warp);  // position in the piece
      const int pg = seg_b ? t - ra : sa.pg0 + t;
      const int id = id_of(ip);
      const int valid = min((seg_b ? len_b : len_a) - pg * kPageSize, kPageSize);  // >= 1
      if (lane == 0) stage_info[warp][i % STAGES] = valid | (seg_b << 5);
      const size_t off = size_t(id) * page_stride;
      const uint16_t* kb = (seg_b ? kbase_b : kbase_a) + off;
      const uint16_t* vb_ = (seg_b ? vbase_b : vbase_a) + off;
      const uint32_t ks = wbuf_s + (i % STAGES) * C::kStageBytes, vs = ks + C::kPageBytes;
#pragma unroll
      for (int j2 = 0; j2 < C::kCopiesPerLane; ++j2) {
        const int idx = lane + 32 * j2;
        const int r = idx / C::kChunksPerRow, c = idx % C::kChunksPerRow;
        const bool ok = r < valid;
        const size_t src = size_t(ok ? r : 0) * D + c * 8;
        cp_async16(ks + swz(r, c), kb + src, ok ? 16 : 0);
        cp_async16(vs + swz(r, c), vb_ + src, ok ? 16 : 0);
      }
    }
    cp_async_commit();
  };

#pragma unroll
  for (int s = 0; s < STAGES; ++s) issue(s);

  // Queries into shared memory (their loads were in flight with the page ids), then this
  // warp's fragments of segment A: lane (row, quad) holds dims 16 kk + 2 quad + {0, 1, 8, 9}.
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem + C::kQOffset);
#pragma unroll
  for (int j = 0; j < (kQVecs + C::kThreads - 1) / C::kThreads; ++j) {
    const int idx = threadIdx.x + j * C::kThreads;
    if (idx < kQVecs) reinterpret_cast<uint4*>(q_s)[idx] = qv[j];
  }
  __syncthreads();
  uint32_t qf[D / 16][2];  // A fragments of Q of the segment being processed
  auto load_qf = [&](int seg) {
    const uint16_t* qr = q_s + (seg * kMaxRows + row) * D + 2 * quad;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      qf[kk][0] = *reinterpret_cast<const uint32_t*>(qr + 16 * kk);
      qf[kk][1] = *reinterpret_cast<const uint32_t*>(qr + 16 * kk + 8);
    }
  };
  load_qf(0);

  // Running state of the segment being processed.
  float m_run = -INFINITY;  // running max of this lane's query head (exp2 domain)
  float l_run = 0.0f;       // this lane's share of the running softmax denominator
  float acc[D / 8][2];      // O fragment: dims 8n + 2*quad + {0,1} of head `row`
#pragma unroll
  for (int t = 0; t < D / 8; ++t) acc[t][0] = acc[t][1] = 0.0f;
  // Writes the running state (l summed over the quad) to a state area of shared memory.
  auto store_state = [&](float* st) {
    const float l = l_run + __shfl_xor_sync(0xffffffffu, l_run, 1);
    const float l4 = l + __shfl_xor_sync(0xffffffffu, l, 2);
#pragma unroll
    for (int t = 0; t < D / 8; ++t)
      *reinterpret_cast<float2*>(st + row * D + 8 * t + 2 * quad) = make_float2(acc[t][0], acc[t][1]);
    if (quad == 0) {
      st[kMaxRows * D + row] = m_run;
      st[kMaxRows * D + kMaxRows + row] = l4;
    }
  };
  float* const park = reinterpret_cast<float*>(smem + C::kParkOffset + warp * C::kStateBytes);
  bool in_b = false;
  // Segment A is done: park its state, start B's with B's queries.
  auto switch_to_b = [&]() {
    in_b = true;
    store_state(park);
    m_run = -INFINITY;
    l_run = 0.0f;
#pragma unroll
    for (int t = 0; t < D / 8; ++t) acc[t][0] = acc[t][1] = 0.0f;
    load_qf(1);
  };

  for (int i = 0; i < n_total; ++i) {
    cp_async_wait<STAGES - 1>();  // page i has landed (for this lane) ...
    __syncwarp();                 // ... and for the whole warp
    const uint32_t ks = wbuf_s + (i % STAGES) * C::kStageBytes, vs = ks + C::kPageBytes;
    const int info = stage_info[warp][i % STAGES];
    const int valid = info & 31;
    if ((info >> 5) && !in_b) switch_to_b();

    // S = Q K^T: two n-tiles of 8 tokens. ldmatrix x4 gives (tok 0-7, dims lo), (tok 0-7,
    // dims hi), (tok 8-15, lo), (tok 8-15, hi): the B fragments of both tiles at once.
    float s0[2] = {0.0f, 0.0f}, s1[2] = {0.0f, 0.0f};
    {
      const int r = (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4(b0, b1, b2, b3, ks + swz(r, 2 * kk + ((lane >> 3) & 1)));
        mma_rows8(s0, qf[kk][0], qf[kk][1], b0, b1);
        mma_rows8(s1, qf[kk][0], qf[kk][1], b2, b3);
      }
    }

    // Online softmax. This lane holds tokens 2q, 2q+1, 8+2q, 9+2q of head `row`.
    float sc[4] = {s0[0] * p.scale_log2, s0[1] * p.scale_log2, s1[0] * p.scale_log2,
                   s1[1] * p.scale_log2};
    if (valid < kPageSize) {  // the sequence's last page; token 0 is always valid
      const int t0 = 2 * quad;
      if (t0 >= valid) sc[0] = -INFINITY;
      if (t0 + 1 >= valid) sc[1] = -INFINITY;
      if (t0 + 8 >= valid) sc[2] = -INFINITY;
      if (t0 + 9 >= valid) sc[3] = -INFINITY;
    }
    float mx = fmaxf(fmaxf(sc[0], sc[1]), fmaxf(sc[2], sc[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run, mx);  // finite: token 0 of the page is valid
    const float alpha = exp2f(m_run - m_new);
    float pr[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) pr[j] = exp2f(sc[j] - m_new);
    l_run = l_run * alpha + ((pr[0] + pr[1]) + (pr[2] + pr[3]));
    m_run = m_new;
#pragma unroll
    for (int t = 0; t < D / 8; ++t) {
      acc[t][0] *= alpha;
      acc[t][1] *= alpha;
    }

    // P as A fragments (the accumulator layout of S is the A layout of P: no shuffles), in
    // bf16 hi + lo.
    const uint32_t ph_lo = pack_bf16(pr[0], pr[1]), ph_hi = pack_bf16(pr[2], pr[3]);
    const float2 f01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ph_lo));
    const float2 f23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ph_hi));
    const uint32_t pl_lo = pack_bf16(pr[0] - f01.x, pr[1] - f01.y);
    const uint32_t pl_hi = pack_bf16(pr[2] - f23.x, pr[3] - f23.y);

    // O += P V: ldmatrix.trans x4 gives (tok 0-7, dims 16np..+7), (tok 8-15, same),
    // (tok 0-7, dims +8..+15), (tok 8-15, same): B fragments of two n-tiles of dims.
    {
      const int r = (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t v0, v1, v2, v3;
        ldmatrix_x4_trans(v0, v1, v2, v3, vs + swz(r, 2 * np + (lane >> 4)));
        mma_rows8(acc[2 * np], ph_lo, ph_hi, v0, v1);
        mma_rows8(acc[2 * np], pl_lo, pl_hi, v0, v1);
        mma_rows8(acc[2 * np + 1], ph_lo, ph_hi, v2, v3);
        mma_rows8(acc[2 * np + 1], pl_lo, pl_hi, v2, v3);
      }
    }

    __syncwarp();  // every lane is done with this stage before it is refilled
    issue(i + STAGES);
  }
  cp_async_wait<0>();
  if (!in_b) switch_to_b();  // from here on A is parked and the registers hold B (maybe empty)

  // Segment A's state is parked; B's (maybe empty) goes into the warp's ring. Then the CTA
  // merges the warps per segment.
  __syncwarp();
  store_state(reinterpret_cast<float*>(wbuf));
  __syncthreads();

  constexpr int kWarpFloats = C::kWarpBytes / 4, kParkFloats = C::kStateFloats;
  constexpr float kLn2 = 0.69314718055994531f;
#pragma unroll
  for (int seg = 0; seg < 2; ++seg) {
    const Segment& s = seg ? sb : sa;
    if (s.unit < 0) continue;
    // Warp w's state of this segment: st + w * stride.
    const float* st = reinterpret_cast<const float*>(smem + (seg ? C::kRingOffset : C::kParkOffset));
    const int stride = seg ? kWarpFloats : kParkFloats;
    const size_t part = (size_t(s.unit) * p.slots + s.chunk) * kMaxRows;
    for (int idx = threadIdx.x; idx < s.rows * D; idx += C::kThreads) {
      const int h = idx / D, d = idx % D;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) M = fmaxf(M, st[w * stride + kMaxRows * D + h]);
      float L = 0.0f, O = 0.0f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        const float mw = st[w * stride + kMaxRows * D + h];
        if (mw == -INFINITY) continue;  // a warp that saw no page of this segment
        const float wt = exp2f(mw - M);
        L += wt * st[w * stride + kMaxRows * D + kMaxRows + h];
        O += wt * st[w * stride + h * D + d];
      }
      const float o = L > 0.0f ? O / L : 0.0f;
      const float lse2 = L > 0.0f ? M + log2f(L) : -INFINITY;
      if (s.chunks == 1) {
        const size_t head = size_t(s.b) * p.num_heads + s.hq0 + h;
        p.o[head * D + d] = o;
        if (d == 0) p.lse[head] = lse2 * kLn2;
      } else {
        p.part_o[(part + h) * D + d] = o;
        if (d == 0) p.part_lse[part + h] = lse2;
      }
    }
  }

  // Units split over several CTAs: count in; the last CTA to arrive merges.
  const bool split_a = sa.chunks > 1, split_b = has_b && sb.chunks > 1;
  if (!split_a && !split_b) return;
  __threadfence();  // this thread's partial stores are visible device-wide before the count
  __syncthreads();
  if (threadIdx.x == 0 && split_a)
    is_last[0] = atomicAdd(p.counters + sa.unit, 1) == sa.chunks - 1;
  if (threadIdx.x == 32 && split_b)  // another warp: the two atomics overlap
    is_last[1] = atomicAdd(p.counters + sb.unit, 1) == sb.chunks - 1;
  __syncthreads();
#pragma unroll
  for (int seg = 0; seg < 2; ++seg) {
    const Segment& s = seg ? sb : sa;
    if (!(seg ? split_b : split_a) || !is_last[seg]) continue;
    __threadfence();  // order the reads below after the other CTAs' counted stores
    // lse = log2 sum_c 2^lse_c, o = sum_c 2^(lse_c - lse) o_c over the unit's chunks. This
    // sits on the call's critical path (the last CTA to finish does it), so no load waits
    // for another: the CTA loads all lse into shared memory in one go, then each thread
    // issues kBatch chunks' o at once with no branch in between. The partials are read
    // through L2 (ld.cg): other SMs wrote them during this kernel. (A loop that tested each
    // chunk's lse before loading the next ran as a chain of L2 round trips: +15 us at batch
    // 1, 17 chunks per unit.)
    constexpr int kVecs = D / 4, kBatch = 16;
    const size_t base = size_t(s.unit) * p.slots * kMaxRows;
    float* lse_s = reinterpret_cast<float*>(smem);  // the rings are free now
    for (int j = threadIdx.x; j < s.chunks * kMaxRows; j += C::kThreads)
      lse_s[j] = __ldcg(p.part_lse + base + j);
    __syncthreads();
    for (int idx = threadIdx.x; idx < s.rows * kVecs; idx += C::kThreads) {
      const int h = idx / kVecs, vv = idx % kVecs;
      const float4* o_c = reinterpret_cast<const float4*>(p.part_o + (base + h) * D) + vv;
      float M = -INFINITY;
      for (int c = 0; c < s.chunks; ++c) M = fmaxf(M, lse_s[c * kMaxRows + h]);
      float L = 0.0f;
      float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int c0 = 0; c0 < s.chunks; c0 += kBatch) {
        float4 x[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          x[j] = c0 + j < s.chunks ? __ldcg(o_c + size_t(c0 + j) * kMaxRows * kVecs)
                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const float l = c0 + j < s.chunks ? lse_s[(c0 + j) * kMaxRows + h] : -INFINITY;
          const float w = l == -INFINITY ? 0.0f : exp2f(l - M);  // a chunk that saw no key: 0
          a.x += w * x[j].x;
          a.y += w * x[j].y;
          a.z += w * x[j].z;
          a.w += w * x[j].w;
          L += w;
        }
      }
      const float inv = L > 0.0f ? 1.0f / L : 0.0f;
      const size_t head = size_t(s.b) * p.num_heads + s.hq0 + h;
      reinterpret_cast<float4*>(p.o + head * D)[vv] = make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv);
      if (vv == 0) p.lse[head] = L > 0.0f ? (M + log2f(L)) * kLn2 : -INFINITY;
    }
    __syncthreads();  // lse_s is reused if this CTA also merges segment B
    if (threadIdx.x == 0) p.counters[s.unit] = 0;  // every CTA of the unit has counted in
  }
}

// ---------------------------------------------------------------------------------------
// Host side: planning and launching.

struct Plan {
  int units = 0;        // U: (sequence, KV head, sub-group) units
  int sub_groups = 1;
  int unit_pages = 1;   // P
  int num_ctas = 0;     // G
  int slots = 1;        // partial slots per unit in the workspace
  int chunk_pages = 1;  // pages per CTA (for reports)
  bool split = false;   // some unit spans several CTAs (workspace needed)
  size_t workspace_bytes = 0;
};

inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Workspace layout: the arrival counters first, at a fixed place and size, so that calls of
// any shape on one workspace never see another call's partials where their counters are;
// every call leaves the counters it used at zero, so the workspace needs zero-filling only
// once after allocation. Then partial o [units][slots][kMaxRows][D] and lse
// [units][slots][kMaxRows], fp32.
constexpr int kMaxUnits = 4096;  // units of a split call (<= the CTA slots of the machine)
constexpr size_t kCounterBytes = size_t(kMaxUnits) * 4;
struct WorkspaceLayout {
  size_t o_offset, lse_offset, bytes;
};
inline WorkspaceLayout workspace_layout(long units, int slots, int head_dim) {
  const size_t states = size_t(units) * slots * kMaxRows;
  WorkspaceLayout w;
  w.o_offset = kCounterBytes;
  w.lse_offset = w.o_offset + align_up(states * head_dim * 4, 256);
  w.bytes = w.lse_offset + align_up(states * 4, 256);
  return w;
}

inline long units_of(const PagedDecodeArgs& a, int& sub_groups) {
  sub_groups = (a.group_size() + kMaxRows - 1) / kMaxRows;
  return long(a.batch) * a.num_kv_heads * sub_groups;
}

// Partial slots per unit: a unit of P pages meets at most ceil(G / U) + 1 of the G pieces
// (each piece is >= T / G = U P / G pages long), whatever P is; G <= capacity.
inline int slots_for(long units, int capacity) {
  return int((capacity + units - 1) / units) + 1;
}

// Cuts the call into CTAs. `capacity`: CTAs the machine holds at once. While the units fit
// (U < capacity) the flat range is cut into as many equal pieces as there are CTA slots, but
// no piece shorter than min_chunk_pages (short sequences: the merge would cost more than the
// spreading gains) and never fewer pieces than units (so that a piece spans at most two
// units). With more units than slots each unit is one CTA and no merge is needed.
inline Plan make_plan(const PagedDecodeArgs& a, int capacity, int min_chunk_pages) {
  Plan plan;
  const long U = units_of(a, plan.sub_groups);
  plan.units = int(U);
  plan.unit_pages = std::max((std::max(a.max_seq_len, 1) + kPageSize - 1) / kPageSize, 1);
  const long long T = (long long)U * plan.unit_pages;
  long long G = U;
  if (U < capacity) {
    G = std::min<long long>(capacity, (T + min_chunk_pages - 1) / min_chunk_pages);
    G = std::max<long long>(G, U);
  }
  plan.num_ctas = int(G);
  plan.split = G > U;
  plan.slots = plan.split ? slots_for(U, capacity) : 1;
  plan.chunk_pages = int((T + G - 1) / std::max<long long>(G, 1));
  plan.workspace_bytes =
      plan.split ? workspace_layout(U, plan.slots, a.head_dim).bytes : 0;
  return plan;
}

// Upper bound of make_plan(...).workspace_bytes over all lengths.
inline size_t max_workspace_bytes(const PagedDecodeArgs& a, int capacity) {
  int sub = 1;
  const long U = units_of(a, sub);
  return U > 0 && U < capacity ? workspace_layout(U, slots_for(U, capacity), a.head_dim).bytes : 0;
}

struct DeviceInfo {
  int sms = 0;
  int cc_major = 0;
};

inline cudaError_t device_info(DeviceInfo& info) {
  constexpr int kMaxDevices = 64;
  static DeviceInfo cache[kMaxDevices];  // benign race: every writer stores the same values
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < kMaxDevices && cache[dev].sms > 0) {
    info = cache[dev];
    return cudaSuccess;
  }
  DeviceInfo d;
  if ((e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
    return e;
  if ((e = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev)) !=
      cudaSuccess)
    return e;
  if (dev < kMaxDevices) cache[dev] = d;
  info = d;
  return cudaSuccess;
}

// A variant of the kernel: raises its shared-memory limit once per device and reports how
// many of its CTAs one SM holds.
template <int D, int WARPS, int STAGES>
struct Variant {
  using C = SplitConfig<D, WARPS, STAGES>;
  static constexpr int kMinChunkPages = 2 * WARPS;

  static cudaError_t ctas_per_sm(int& out) {
    constexpr int kMaxDevices = 64;
    static int cache[kMaxDevices];
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < kMaxDevices && cache[dev] > 0) {
      out = cache[dev];
      return cudaSuccess;
    }
    e = cudaFuncSetAttribute(split_kernel<D, WARPS, STAGES>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (e != cudaSuccess) return e;
    e = cudaFuncSetAttribute(split_kernel<D, WARPS, STAGES>,
                             cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return e;
    int n = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, split_kernel<D, WARPS, STAGES>,
                                                      C::kThreads, C::kSmemBytes);
    if (e != cudaSuccess) return e;
    n = std::max(n, 1);
    if (dev < kMaxDevices) cache[dev] = n;
    out = n;
    return cudaSuccess;
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

  // `capacity_override` > 0 replaces the resident-slot count (tuning experiments; the
  // workspace must then be sized for it).
  static cudaError_t launch(const PagedDecodeArgs& a, cudaStream_t stream,
                            int capacity_override = 0, Plan* plan_out = nullptr) {
    if (a.batch == 0) return cudaSuccess;
    int cap = 0;
    cudaError_t e = capacity(cap);
    if (e != cudaSuccess) return e;
    if (capacity_override > 0) cap = capacity_override;
    const Plan plan = make_plan(a, cap, kMinChunkPages);
    if (plan_out) *plan_out = plan;
    if (plan.split && (plan.units > kMaxUnits || a.workspace == nullptr ||
                       a.workspace_bytes < plan.workspace_bytes))
      return cudaErrorInvalidValue;

    SplitParams sp;
    sp.q = a.q;
    sp.k = a.k_pool;
    sp.v = a.v_pool;
    sp.page_table = a.page_table;
    sp.seq_lens = a.seq_lens;
    sp.o = a.o;
    sp.lse = a.lse;
    sp.part_o = sp.part_lse = nullptr;
    sp.counters = nullptr;
    if (plan.split) {
      const WorkspaceLayout wl = workspace_layout(plan.units, plan.slots, D);
      char* ws = static_cast<char*>(a.workspace);
      sp.counters = reinterpret_cast<int*>(ws);
      sp.part_o = reinterpret_cast<float*>(ws + wl.o_offset);
      sp.part_lse = reinterpret_cast<float*>(ws + wl.lse_offset);
    }
    sp.slots = plan.slots;
    sp.num_heads = a.num_heads;
    sp.num_kv_heads = a.num_kv_heads;
    sp.group = a.group_size();
    sp.sub_groups = plan.sub_groups;
    sp.max_pages_per_seq = a.max_pages_per_seq;
    sp.unit_pages = plan.unit_pages;
    sp.num_ctas = plan.num_ctas;
    sp.total_pages = (long long)plan.units * plan.unit_pages;
    sp.scale_log2 = a.scale * 1.4426950408889634f;

    split_kernel<D, WARPS, STAGES><<<plan.num_ctas, C::kThreads, C::kSmemBytes, stream>>>(sp);
    return cudaGetLastError();
  }
};

// The variant the library uses (paged_decode_attention.cu), chosen with the variant sweep of
// bench/attention/decode_attention_bench.cu on an H100.
template <int D>
using DefaultVariant = Variant<D, 8, 2>;

// Shapes the kernels accept (device pointers are not checked).
inline bool supported(const PagedDecodeArgs& a) {
  return a.batch >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 &&
         a.num_heads % a.num_kv_heads == 0 && (a.head_dim == 64 || a.head_dim == 128) &&
         a.page_size == kPageSize && a.max_pages_per_seq > 0 && a.max_seq_len >= 0 &&
         a.max_seq_len <= a.max_pages_per_seq * kPageSize;
}

}  // namespace skim::cuda::detail
