#include "backend/cuda/paged_prefill_attention.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <utility>

#include "backend/cuda/paged_decode_attention_impl.cuh"  // PTX wrappers, merge_kernel, device_info
#include "backend/cuda/wgmma.cuh"

namespace skim::cuda {

namespace {

using detail::cp_async16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::ldmatrix_x4;
using detail::ldmatrix_x4_trans;
using detail::mma_m16n8k16;
using detail::pack_bf16;
using detail::smem_addr;

constexpr int kPage = 16;
constexpr int kWarps = 4;

// A CTA's tile for head_dim D with MT m16 tiles per warp. Its rows are (token, query head)
// pairs of one KV head, packed token-major: row R is token R / group, head R % group of the
// group. The heads of a group share every K/V row, so they share the CTA's copy of it.
template <int D, int MT>
struct Tile {
  static constexpr int kKeys = 64;  // keys per step of the key loop: four pages
  static constexpr int kRows = kWarps * MT * 16;
  static constexpr int kWarpRows = MT * 16;
  static constexpr int kRowBytes = D * 2;
  static constexpr int kPieces = D / 8;  // 16-byte pieces of a row
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kKVBytes = kKeys * kRowBytes;  // one step's K (or V)
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes;  // Q, then K, V of two stages
  static constexpr int kThreads = kWarps * 32;
  // ldmatrix reads the same piece of 8 consecutive rows: piece c of row r sits at c ^ (r & 7),
  // so the 8 reads hit 8 different bank groups.
  __device__ static __forceinline__ uint32_t swz(int r, int c) {
    return uint32_t(r * kRowBytes + ((c ^ (r & 7)) << 4));
  }
};

// Split of the key range: CTA z of a row tile takes key steps [z * steps_per_split, ...).
// With splits > 1 each CTA writes its rows' normalised partial o and lse to part_o
// [n][num_heads][splits][D] and part_lse [n][num_heads][splits] (merge_kernel's layout, the
// rows as its batch); rows whose position precedes the CTA's keys write (0, -inf).
struct Split {
  int splits = 1;
  int steps_per_split = 1 << 24;
  float* part_o = nullptr;
  float* part_lse = nullptr;
};

// What a CTA works on: its KV head, its sequence, its packed rows and the key steps it visits.
struct CtaWork {
  const int32_t* table;  // the sequence's pages
  int h, group;
  int row0;        // the sequence's first row of q, o and positions
  int total_rows;  // its packed rows: rows x group
  int r0;          // the tile's first packed row
  int min_pos;     // position of the tile's first token: steps past it need the causal mask
  int pages;       // pages the tile's last token sees
  int begin, end;
  bool idle = false;  // past the last tile: with several sequences the grid is a bound
  __device__ int token(int r) const { return row0 + r / group; }
  __device__ size_t head_row(const PagedPrefillArgs& a, int r) const {  // row of q / o: (token, query head)
    return size_t(token(r)) * a.num_heads + h * group + r % group;
  }
};

template <class T>
__device__ __forceinline__ CtaWork cta_work(const PagedPrefillArgs& a, const Split& sp) {
  CtaWork w;
  w.h = blockIdx.y;
  w.group = a.num_heads / a.num_kv_heads;
  // The last row tiles have the longest prefixes: they start first, so none runs alone at the end.
  int tile = gridDim.x - 1 - blockIdx.x, seq = 0, row0 = 0, rows = a.n;
  if (a.seq_rows) {  // this tile's sequence (a handful: a scan)
    for (; seq < a.num_seqs; ++seq) {
      row0 = a.seq_rows[seq];
      rows = a.seq_rows[seq + 1] - row0;
      const int tiles = (rows * w.group + T::kRows - 1) / T::kRows;
      if (tile < tiles) break;
      tile -= tiles;
    }
    if (seq == a.num_seqs) {
      w.idle = true;
      return w;
    }
  }
  w.table = a.page_table + (a.seq_rows ? size_t(row0) * a.table_stride : 0);
  w.row0 = row0;
  w.total_rows = rows * w.group;
  w.r0 = tile * T::kRows;
  const int last_row = min(w.total_rows, w.r0 + T::kRows) - 1;
  w.min_pos = a.positions[w.token(w.r0)];  // rows are consecutive positions
  const int last_pos = a.positions[w.token(last_row)];
  w.pages = last_pos / kPage + 1;
  w.begin = blockIdx.z * sp.steps_per_split;
  w.end = min(last_pos / T::kKeys + 1, w.begin + sp.steps_per_split);
  return w;
}

// The tile's queries into shared memory; rows past the chunk are zeros.
template <class T>
__device__ __forceinline__ void load_q_tile(const PagedPrefillArgs& a, const CtaWork& w, uint32_t q_s) {
  for (int i = threadIdx.x; i < T::kRows * T::kPieces; i += T::kThreads) {
    const int row = i / T::kPieces, c = i % T::kPieces, r = w.r0 + row;
    const bool ok = r < w.total_rows;
    const size_t head = ok ? w.head_row(a, r) : 0;
    cp_async16(q_s + T::swz(row, c), a.q + head * T::kRowBytes / 2 + c * 8, ok ? 16 : 0);
  }
}

// K and V of the step's four pages into a stage; pages past the tile's prefix are zeros (their
// scores are masked, and zero V keeps 0 x V finite).
template <class T>
__device__ __forceinline__ void load_kv_step(const PagedPrefillArgs& a, const CtaWork& w, int step, uint32_t k_s,
                                             uint32_t v_s) {
  for (int i = threadIdx.x; i < T::kKeys * T::kPieces; i += T::kThreads) {
    const int key = i / T::kPieces, c = i % T::kPieces, page = step * (T::kKeys / kPage) + key / kPage;
    const bool ok = page < w.pages;
    const size_t off =
        ok ? ((size_t(w.table[page]) * a.num_kv_heads + w.h) * kPage + key % kPage) * (T::kRowBytes / 2) + c * 8
           : 0;
    cp_async16(k_s + T::swz(key, c), a.k_pool + off, ok ? 16 : 0);
    cp_async16(v_s + T::swz(key, c), a.v_pool + off, ok ? 16 : 0);
  }
}

// s = Q K^T for the warp's rows and the step's 64 keys: s[mt][j] holds keys 8j..8j+7 in the
// m16n8 accumulator layout. The B fragments of K serve all MT row tiles.
template <class T, int D, int MT>
__device__ __forceinline__ void compute_scores(uint32_t q_s, uint32_t k_s, int warp, int lane,
                                               float (&s)[MT][T::kKeys / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < T::kKeys / 8; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    uint32_t qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldmatrix_x4(qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3],
                  q_s + T::swz(warp * T::kWarpRows + mt * 16 + (lane & 15), 2 * kc + (lane >> 4)));
#pragma unroll
    for (int np = 0; np < T::kKeys / 16; ++np) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(b0, b1, b2, b3, k_s + T::swz(16 * np + ((lane >> 4) << 3) + (lane & 7), 2 * kc + ((lane >> 3) & 1)));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_m16n8k16(s[mt][2 * np], qa[mt], b0, b1);
        mma_m16n8k16(s[mt][2 * np + 1], qa[mt], b2, b3);
      }
    }
  }
}

// Keys after a row's position score -inf (the causal mask; also the pages past the prefix).
// Only the steps at the tile's diagonal come here: the rows' positions are loaded then, not
// held in registers through the loop.
template <class T, int MT>
__device__ __forceinline__ void mask_scores(const PagedPrefillArgs& a, const CtaWork& w, int warp, int lane, int key0,
                                            float (&s)[MT][T::kKeys / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = w.r0 + warp * T::kWarpRows + mt * 16 + lane / 4 + 8 * half;
      const int pos = r < w.total_rows ? a.positions[w.token(r)] : -1;  // past the chunk: all masked
#pragma unroll
      for (int j = 0; j < T::kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (key0 + 8 * j + 2 * (lane & 3) + e > pos) s[mt][j][2 * half + e] = -INFINITY;
    }
}

// The online softmax of one step: new running maxima, o and l rescaled, and the step's
// probabilities as bf16 A fragments p[mt][j][half] (row lane/4 + 8 half, keys 8j + 2(lane%4),
// + 1). l sums the rounded weights P.V uses (so o stays a weighted mean), per lane: the four
// lanes of a row are added at the end.
template <int D, int MT, int KEYS>
__device__ __forceinline__ void update_softmax(float (&s)[MT][KEYS / 8][4], float scale_log2, float (&m)[MT][2],
                                               float (&l)[MT][2], float (&o)[MT][D / 8][4],
                                               uint32_t (&p)[MT][KEYS / 8][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < KEYS / 8; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * half], s[mt][j][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[mt][half], mx * scale_log2);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet stays at 0
      const float alpha = exp2f(m[mt][half] - base);
      m[mt][half] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < KEYS / 8; ++j) {
        const uint32_t pk = pack_bf16(exp2f(fmaf(s[mt][j][2 * half], scale_log2, -base)),
                                      exp2f(fmaf(s[mt][j][2 * half + 1], scale_log2, -base)));
        p[mt][j][half] = pk;
        sum += __uint_as_float(pk << 16) + __uint_as_float(pk & 0xffff0000u);
      }
      l[mt][half] = l[mt][half] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][2 * half] *= alpha, o[mt][dt][2 * half + 1] *= alpha;
    }
}

// o += P V: the step's probabilities (registers) times its V rows (ldmatrix.trans gives the
// B fragments of V stored [key][dim]).
template <class T, int D, int MT>
__device__ __forceinline__ void accumulate_pv(const uint32_t (&p)[MT][T::kKeys / 8][2], uint32_t v_s, int lane,
                                              float (&o)[MT][D / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < T::kKeys / 16; ++kk) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = p[mt][2 * kk][0];
      pa[mt][1] = p[mt][2 * kk][1];
      pa[mt][2] = p[mt][2 * kk + 1][0];
      pa[mt][3] = p[mt][2 * kk + 1][1];
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(b0, b1, b2, b3, v_s + T::swz(16 * kk + (((lane >> 3) & 1) << 3) + (lane & 7), 2 * dp + (lane >> 4)));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_m16n8k16(o[mt][2 * dp], pa[mt], b0, b1);
        mma_m16n8k16(o[mt][2 * dp + 1], pa[mt], b2, b3);
      }
    }
  }
}

// The warp's rows' o / l and lse, or this split's partials.
template <class T, int D, int MT>
__device__ __forceinline__ void store_rows(const PagedPrefillArgs& a, const CtaWork& w, const Split& sp, int warp,
                                           int lane, const float (&o)[MT][D / 8][4], const float (&m)[MT][2],
                                           float (&l)[MT][2]) {
  const int ns = sp.splits;
  float* out_o = ns > 1 ? sp.part_o : a.o;
  float* out_lse = ns > 1 ? sp.part_lse : a.lse;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = l[mt][half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = w.r0 + warp * T::kWarpRows + mt * 16 + lane / 4 + 8 * half;
      if (r >= w.total_rows) continue;
      const size_t at = w.head_row(a, r) * ns + blockIdx.z;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      float* dst = out_o + at * D + 2 * (lane & 3);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<float2*>(dst + 8 * dt) = make_float2(o[mt][dt][2 * half] * inv, o[mt][dt][2 * half + 1] * inv);
      if ((lane & 3) == 0) out_lse[at] = sum > 0.0f ? (m[mt][half] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
    }
}

// Flash attention (FlashAttention-2's loop) over the paged cache: Q of the tile stays in shared
// memory, each step's K/V pages arrive by cp.async while the previous step computes, scores
// and P.V run on mma.sync with o, m and l in registers. One CTA per (row tile, KV head, split).
template <int D, int MT>
__global__ void __launch_bounds__(kWarps * 32) flash_prefill_kernel(PagedPrefillArgs a, Split sp) {
  using T = Tile<D, MT>;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_s = smem_addr(smem), kv_s = q_s + T::kQBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const CtaWork w = cta_work<T>(a, sp);
  if (w.idle) return;
  const float scale_log2 = a.scale * 1.4426950408889634f;

  load_q_tile<T>(a, w, q_s);
  if (w.begin < w.end) load_kv_step<T>(a, w, w.begin, kv_s, kv_s + T::kKVBytes);
  cp_async_commit();

  float o[MT][D / 8][4], m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
  }

  for (int step = w.begin; step < w.end; ++step) {
    cp_async_wait<0>();
    __syncthreads();  // this step's stage has arrived, and every warp is done with the other one
    const uint32_t k_s = kv_s + ((step - w.begin) & 1) * 2 * T::kKVBytes, v_s = k_s + T::kKVBytes;
    if (step + 1 < w.end) {
      const uint32_t k_next = kv_s + ((step + 1 - w.begin) & 1) * 2 * T::kKVBytes;
      load_kv_step<T>(a, w, step + 1, k_next, k_next + T::kKVBytes);
    }
    cp_async_commit();
    float s[MT][T::kKeys / 8][4];
    compute_scores<T, D, MT>(q_s, k_s, warp, lane, s);
    if ((step + 1) * T::kKeys - 1 > w.min_pos) mask_scores<T, MT>(a, w, warp, lane, step * T::kKeys, s);
    uint32_t p[MT][T::kKeys / 8][2];
    update_softmax<D, MT, T::kKeys>(s, scale_log2, m, l, o, p);
    accumulate_pv<T, D, MT>(p, v_s, lane, o);
  }
  store_rows<T, D, MT>(a, w, sp, warp, lane, o, m, l);
}

// The Hopper form: two warpgroups of 64 rows each (128 rows per CTA), 128 keys per step,
// S = Q K^T and O += P V on wgmma. Each operand tile is stored as 64-element column halves
// ([half][row][64], 128 bytes a row, 128-byte swizzle: piece c of row r at c ^ (r & 7)), the
// layout wgmma's descriptors read; Q, K (K-major) and V (N-major: its descriptor transposes).
template <int D>
struct TileSm90 {
  static constexpr int kRows = 128, kKeys = 128, kWarpRows = 16, kThreads = 256;
  static constexpr int kRowBytes = D * 2, kPieces = D / 8;
  static constexpr int kHalfBytes = 128 * 128;  // one 64-column half of a 128-row (or key) tile
  static constexpr int kQBytes = kRows * D * 2, kKVBytes = kKeys * D * 2;
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes + 1024;  // + alignment to 1024
  __device__ static __forceinline__ uint32_t swz(int r, int c) {
    return uint32_t((c >> 3) * kHalfBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4));
  }
};

// s = Q K^T for the warpgroup's 64 rows and the step's 128 keys (d / 16 wgmma k-steps).
template <int D>
__device__ __forceinline__ void scores_sm90(uint32_t q_s, uint32_t k_s, int wg, float (&s)[64]) {
  using T = TileSm90<D>;
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.0f;  // the first k-step overwrites them; no undefined reads
  detail::wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    const uint32_t half = (kc / 4) * T::kHalfBytes, kstep = (kc % 4) * 32;
    detail::wgmma_m64n128k16_ss(s, detail::sw128_desc(q_s + half + wg * 64 * 128 + kstep, 16, 1024),
                                detail::sw128_desc(k_s + half + kstep, 16, 1024), kc > 0);
  }
  detail::wgmma_commit();
  detail::wgmma_wait<0>();
  detail::fence_registers(s);
}

// o += P V over the step's 128 keys: P from registers (the scores' layout is wgmma's A
// fragment), V N-major: its two 64-column halves kHalfBytes apart, groups of 8 keys 1024 apart.
template <int D>
__device__ __forceinline__ void pv_sm90(const uint32_t (&p)[1][16][2], uint32_t v_s, float (&o)[D / 2]) {
  using T = TileSm90<D>;
  detail::fence_registers(o);
  detail::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const uint32_t a[4] = {p[0][2 * kk][0], p[0][2 * kk][1], p[0][2 * kk + 1][0], p[0][2 * kk + 1][1]};
    const uint64_t desc = detail::sw128_desc(v_s + kk * 16 * 128, T::kHalfBytes, 1024);
    if constexpr (D == 128)
      detail::wgmma_m64n128k16_rs(o, a, desc);
    else
      detail::wgmma_m64n64k16_rs(o, a, desc);
  }
  detail::wgmma_commit();
  detail::wgmma_wait<0>();
  detail::fence_registers(o);
}

// FlashAttention's loop on Hopper: as flash_prefill_kernel, with a warpgroup per 64 rows and
// the MMAs on wgmma. The softmax and the row bookkeeping are the mma.sync kernel's (one 16-row
// tile per warp).
template <int D>
__global__ void __launch_bounds__(256, 1) flash_prefill_sm90_kernel(PagedPrefillArgs a, Split sp) {
#ifndef SKIM_WGMMA
  __trap();  // launched only where sm_90a code exists (wgmma_available): elsewhere the MMAs are empty
#endif
  using T = TileSm90<D>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t q_s = (smem_addr(smem_raw) + 1023) & ~1023u, kv_s = q_s + T::kQBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;
  const CtaWork w = cta_work<T>(a, sp);
  if (w.idle) return;
  const float scale_log2 = a.scale * 1.4426950408889634f;

  load_q_tile<T>(a, w, q_s);
  if (w.begin < w.end) load_kv_step<T>(a, w, w.begin, kv_s, kv_s + T::kKVBytes);
  cp_async_commit();

  float o[1][D / 8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[0][dt][0] = o[0][dt][1] = o[0][dt][2] = o[0][dt][3] = 0.0f;
  for (int step = w.begin; step < w.end; ++step) {
    cp_async_wait<0>();
    detail::fence_proxy_async();  // cp.async wrote it; wgmma reads it
    __syncthreads();  // this step's stage has arrived, and every warpgroup is done with the other one
    const uint32_t k_s = kv_s + ((step - w.begin) & 1) * 2 * T::kKVBytes, v_s = k_s + T::kKVBytes;
    if (step + 1 < w.end) {
      const uint32_t k_next = kv_s + ((step + 1 - w.begin) & 1) * 2 * T::kKVBytes;
      load_kv_step<T>(a, w, step + 1, k_next, k_next + T::kKVBytes);
    }
    cp_async_commit();
    float s[1][16][4];
    scores_sm90<D>(q_s, k_s, wg, reinterpret_cast<float(&)[64]>(s));
    if ((step + 1) * T::kKeys - 1 > w.min_pos) mask_scores<T, 1>(a, w, warp, lane, step * T::kKeys, s);
    uint32_t p[1][16][2];
    update_softmax<D, 1, T::kKeys>(s, scale_log2, m, l, o, p);
    pv_sm90<D>(p, v_s, reinterpret_cast<float(&)[D / 2]>(o));
  }
  store_rows<T, D, 1>(a, w, sp, warp, lane, o, m, l);
}

// Key splits per row tile, only when the row tiles alone leave SMs idle: then enough CTAs
// for two per SM, each split at least kMinSplitKeys keys, at most kMaxSplits.
constexpr int kMaxSplits = 64;
constexpr int kMinSplitKeys = 256;
struct SplitPlan {
  int splits = 1, steps_per_split = 1 << 24;
};
SplitPlan plan_splits(int row_tiles, int units, int max_position, int keys_per_step, int sms) {
  SplitPlan p;
  const int steps = max_position / keys_per_step + 1;
  const long ctas = long(row_tiles) * units;
  if (ctas >= sms) return p;
  int s = int(std::min<long>((2L * sms + ctas - 1) / ctas, kMaxSplits));
  s = std::min(s, std::max(1, steps * keys_per_step / kMinSplitKeys));
  if (s <= 1) return p;
  p.steps_per_split = (steps + s - 1) / s;
  p.splits = (steps + p.steps_per_split - 1) / p.steps_per_split;
  return p;
}

size_t split_bytes(int n, int num_heads, int head_dim, int splits) {
  const size_t heads = size_t(n) * num_heads * splits;
  return detail::align_up(heads * head_dim * 4, 256) + detail::align_up(heads * 4, 256);
}

int sm_count() {
  detail::DeviceInfo info;
  return detail::device_info(info) == cudaSuccess ? info.sms : 132;
}

// Each kernel's shape: rows per CTA, keys per step, threads, shared memory, the kernel.
struct KernelShape {
  int rows, keys, threads, smem;
  const void* fn;
};
template <int D>
KernelShape kernel_shape(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kMma64:
      return {Tile<D, 1>::kRows, Tile<D, 1>::kKeys, Tile<D, 1>::kThreads, Tile<D, 1>::kSmemBytes,
              reinterpret_cast<const void*>(flash_prefill_kernel<D, 1>)};
    case PrefillKernel::kMma128:
      return {Tile<D, 2>::kRows, Tile<D, 2>::kKeys, Tile<D, 2>::kThreads, Tile<D, 2>::kSmemBytes,
              reinterpret_cast<const void*>(flash_prefill_kernel<D, 2>)};
    default:
      return {TileSm90<D>::kRows, TileSm90<D>::kKeys, TileSm90<D>::kThreads, TileSm90<D>::kSmemBytes,
              reinterpret_cast<const void*>(flash_prefill_sm90_kernel<D>)};
  }
}

// Whether the wgmma kernel has sm_90a code for this device (a build without the 90a target
// would run compute_80 PTX, where its body is empty). Asked once per device.
bool wgmma_available() {
  constexpr int kMaxDevices = 64;
  static int known[kMaxDevices] = {};  // 0 unknown, 1 yes, 2 no; a benign race (same answer)
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (dev < kMaxDevices && known[dev]) return known[dev] == 1;
  cudaFuncAttributes attr{};
  int major = 0;
  const bool yes = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                   major == 9 && cudaFuncGetAttributes(&attr, flash_prefill_sm90_kernel<128>) == cudaSuccess &&
                   attr.ptxVersion >= 90;
  if (dev < kMaxDevices) known[dev] = yes ? 1 : 2;
  return yes;
}

// The dynamic shared memory a kernel needs, allowed once per (kernel, device): tensor
// parallelism launches on several. A benign race: every writer stores the same value.
cudaError_t allow_smem(const KernelShape& k, int kernel_id) {
  constexpr int kMaxDevices = 64, kKernels = 6;
  static bool done[kKernels][kMaxDevices] = {};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (dev < kMaxDevices && done[kernel_id][dev]) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem);
  if (e == cudaSuccess && dev < kMaxDevices) done[kernel_id][dev] = true;
  return e;
}

int row_tiles(int n, int group, int rows_per_tile) { return (n * group + rows_per_tile - 1) / rows_per_tile; }

template <int D>
cudaError_t launch(const PagedPrefillArgs& a, PrefillKernel kind, cudaStream_t stream) {
  const KernelShape k = kernel_shape<D>(kind);
  if (cudaError_t e = allow_smem(k, int(kind) * 2 + (D == 128)); e != cudaSuccess) return e;
  // Several sequences: each may leave one tile part-filled; a bound, the CTAs past it return.
  const int group = a.num_heads / a.num_kv_heads, tiles = row_tiles(a.n, group, k.rows) + (a.seq_rows ? a.num_seqs : 0);
  const SplitPlan plan =
      a.workspace ? plan_splits(tiles, a.num_kv_heads, a.max_position, k.keys, sm_count()) : SplitPlan{};
  Split sp;
  if (plan.splits > 1 && a.workspace_bytes >= split_bytes(a.n, a.num_heads, D, plan.splits)) {
    sp.splits = plan.splits;
    sp.steps_per_split = plan.steps_per_split;
    sp.part_o = static_cast<float*>(a.workspace);
    sp.part_lse = reinterpret_cast<float*>(static_cast<char*>(a.workspace) +
                                           detail::align_up(size_t(a.n) * a.num_heads * sp.splits * D * 4, 256));
  }
  const dim3 grid(tiles, a.num_kv_heads, sp.splits);
  PagedPrefillArgs args = a;
  void* params[] = {&args, &sp};
  if (cudaError_t e = cudaLaunchKernel(k.fn, grid, dim3(k.threads), params, size_t(k.smem), stream); e != cudaSuccess)
    return e;
  if (sp.splits == 1) return cudaSuccess;
  detail::MergeParams mp;
  mp.part_o = sp.part_o;
  mp.part_lse = sp.part_lse;
  mp.o = a.o;
  mp.lse = a.lse;
  mp.num_heads = a.num_heads;
  mp.num_chunks = sp.splits;
  detail::merge_kernel<D><<<a.n * a.num_heads, detail::kMergeThreads, 0, stream>>>(mp);
  return cudaGetLastError();
}

bool supported(const PagedPrefillArgs& a) {
  return a.n >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
         (a.head_dim == 64 || a.head_dim == 128) && a.page_size == kPage && a.num_seqs >= 1 &&
         (a.num_seqs == 1 || a.seq_rows);
}

}  // namespace

bool prefill_kernel_available(PrefillKernel kind) { return kind != PrefillKernel::kWgmma || wgmma_available(); }

PrefillKernel default_prefill_kernel() {
  return wgmma_available() ? PrefillKernel::kWgmma : PrefillKernel::kMma128;
}

cudaError_t paged_prefill_attention_with(const PagedPrefillArgs& a, PrefillKernel kind, cudaStream_t stream) {
  if (!supported(a) || !prefill_kernel_available(kind)) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  return a.head_dim == 64 ? launch<64>(a, kind, stream) : launch<128>(a, kind, stream);
}

cudaError_t paged_prefill_attention(const PagedPrefillArgs& a, cudaStream_t stream) {
  return paged_prefill_attention_with(a, default_prefill_kernel(), stream);
}

size_t paged_prefill_workspace_size(int max_rows, int num_heads, int num_kv_heads, int head_dim, int max_position) {
  if (max_rows <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads) return 0;
  const int group = num_heads / num_kv_heads, sms = sm_count();
  size_t bytes = 0;
  for (int n = 1; n <= max_rows; ++n)
    for (auto [rows, keys] : {std::pair{64, 64}, std::pair{128, 64}, std::pair{128, 128}}) {  // every kernel
      const SplitPlan p = plan_splits(row_tiles(n, group, rows), num_kv_heads, max_position, keys, sms);
      if (p.splits > 1) bytes = std::max(bytes, split_bytes(n, num_heads, head_dim, p.splits));
    }
  return bytes;
}

}  // namespace skim::cuda
