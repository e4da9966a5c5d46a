#include "backend/cuda/paged_prefill_attention.cuh"

#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/paged_decode_attention_impl.cuh"  // PTX wrappers, merge_kernel, device_info

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
constexpr int kKeys = 64;  // keys per step of the key loop: four pages

// A CTA's tile for head_dim D with MT m16 tiles per warp. Its rows are (token, query head)
// pairs of one KV head, packed token-major: row R is token R / group, head R % group of the
// group. The heads of a group share every K/V row, so they share the CTA's copy of it.
template <int D, int MT>
struct Tile {
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
  w.end = min(last_pos / kKeys + 1, w.begin + sp.steps_per_split);
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
  for (int i = threadIdx.x; i < kKeys * T::kPieces; i += T::kThreads) {
    const int key = i / T::kPieces, c = i % T::kPieces, page = step * (kKeys / kPage) + key / kPage;
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
                                               float (&s)[MT][kKeys / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    uint32_t qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldmatrix_x4(qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3],
                  q_s + T::swz(warp * T::kWarpRows + mt * 16 + (lane & 15), 2 * kc + (lane >> 4)));
#pragma unroll
    for (int np = 0; np < kKeys / 16; ++np) {
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
                                            float (&s)[MT][kKeys / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = w.r0 + warp * T::kWarpRows + mt * 16 + lane / 4 + 8 * half;
      const int pos = r < w.total_rows ? a.positions[w.token(r)] : -1;  // past the chunk: all masked
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (key0 + 8 * j + 2 * (lane & 3) + e > pos) s[mt][j][2 * half + e] = -INFINITY;
    }
}

// The online softmax of one step: new running maxima, o and l rescaled, and the step's
// probabilities as bf16 A fragments p[mt][j][half] (row lane/4 + 8 half, keys 8j + 2(lane%4),
// + 1). l sums the rounded weights P.V uses (so o stays a weighted mean), per lane: the four
// lanes of a row are added at the end.
template <int D, int MT>
__device__ __forceinline__ void update_softmax(float (&s)[MT][kKeys / 8][4], float scale_log2, float (&m)[MT][2],
                                               float (&l)[MT][2], float (&o)[MT][D / 8][4],
                                               uint32_t (&p)[MT][kKeys / 8][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * half], s[mt][j][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[mt][half], mx * scale_log2);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet stays at 0
      const float alpha = exp2f(m[mt][half] - base);
      m[mt][half] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) {
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
__device__ __forceinline__ void accumulate_pv(const uint32_t (&p)[MT][kKeys / 8][2], uint32_t v_s, int lane,
                                              float (&o)[MT][D / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
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
    float s[MT][kKeys / 8][4];
    compute_scores<T, D, MT>(q_s, k_s, warp, lane, s);
    if ((step + 1) * kKeys - 1 > w.min_pos) mask_scores<T, MT>(a, w, warp, lane, step * kKeys, s);
    uint32_t p[MT][kKeys / 8][2];
    update_softmax<D, MT>(s, scale_log2, m, l, o, p);
    accumulate_pv<T, D, MT>(p, v_s, lane, o);
  }
  store_rows<T, D, MT>(a, w, sp, warp, lane, o, m, l);
}

// Key splits per row tile, only when the row tiles alone leave SMs idle: then enough CTAs
// for two per SM, each split at least kMinSplitSteps steps of keys, at most kMaxSplits.
constexpr int kMaxSplits = 64;
constexpr int kMinSplitSteps = 4;
struct SplitPlan {
  int splits = 1, steps_per_split = 1 << 24;
};
SplitPlan plan_splits(int row_tiles, int units, int max_position, int sms) {
  SplitPlan p;
  const int steps = max_position / kKeys + 1;
  const long ctas = long(row_tiles) * units;
  if (ctas >= sms) return p;
  int s = int(std::min<long>((2L * sms + ctas - 1) / ctas, kMaxSplits));
  s = std::min(s, std::max(1, steps / kMinSplitSteps));
  if (s <= 1) return p;
  p.steps_per_split = (steps + s - 1) / s;
  p.splits = (steps + p.steps_per_split - 1) / p.steps_per_split;
  return p;
}

int row_tiles(int n, int group, int m_tiles) {
  const int rows = kWarps * m_tiles * 16;
  return (n * group + rows - 1) / rows;
}

size_t split_bytes(int n, int num_heads, int head_dim, int splits) {
  const size_t heads = size_t(n) * num_heads * splits;
  return detail::align_up(heads * head_dim * 4, 256) + detail::align_up(heads * 4, 256);
}

int sm_count() {
  detail::DeviceInfo info;
  return detail::device_info(info) == cudaSuccess ? info.sms : 132;
}

// The dynamic shared memory the kernel needs, allowed once per device (tensor parallelism
// launches on several). A benign race: every writer of a device's entry stores the same value.
template <int D, int MT>
cudaError_t allow_smem() {
  constexpr int kMaxDevices = 64;
  static bool done[kMaxDevices] = {};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (dev < kMaxDevices && done[dev]) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(flash_prefill_kernel<D, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Tile<D, MT>::kSmemBytes);
  if (e == cudaSuccess && dev < kMaxDevices) done[dev] = true;
  return e;
}

template <int D, int MT>
cudaError_t launch(const PagedPrefillArgs& a, cudaStream_t stream) {
  if (cudaError_t e = allow_smem<D, MT>(); e != cudaSuccess) return e;
  // Several sequences: each may leave one tile part-filled; a bound, the CTAs past it return.
  const int group = a.num_heads / a.num_kv_heads, tiles = row_tiles(a.n, group, MT) + (a.seq_rows ? a.num_seqs : 0);
  const SplitPlan plan = a.workspace ? plan_splits(tiles, a.num_kv_heads, a.max_position, sm_count()) : SplitPlan{};
  Split sp;
  if (plan.splits > 1 && a.workspace_bytes >= split_bytes(a.n, a.num_heads, D, plan.splits)) {
    sp.splits = plan.splits;
    sp.steps_per_split = plan.steps_per_split;
    sp.part_o = static_cast<float*>(a.workspace);
    sp.part_lse = reinterpret_cast<float*>(static_cast<char*>(a.workspace) +
                                           detail::align_up(size_t(a.n) * a.num_heads * sp.splits * D * 4, 256));
  }
  const dim3 grid(tiles, a.num_kv_heads, sp.splits);
  flash_prefill_kernel<D, MT><<<grid, kWarps * 32, Tile<D, MT>::kSmemBytes, stream>>>(a, sp);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || sp.splits == 1) return e;
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

cudaError_t paged_prefill_attention_tiles(const PagedPrefillArgs& a, int m_tiles, cudaStream_t stream) {
  if (!supported(a) || (m_tiles != 1 && m_tiles != 2)) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  if (a.head_dim == 64) return m_tiles == 1 ? launch<64, 1>(a, stream) : launch<64, 2>(a, stream);
  return m_tiles == 1 ? launch<128, 1>(a, stream) : launch<128, 2>(a, stream);
}

cudaError_t paged_prefill_attention(const PagedPrefillArgs& a, cudaStream_t stream) {
  return paged_prefill_attention_tiles(a, kDefaultPrefillMTiles, stream);
}

size_t paged_prefill_workspace_size(int max_rows, int num_heads, int num_kv_heads, int head_dim, int max_position) {
  if (max_rows <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads) return 0;
  const int group = num_heads / num_kv_heads, sms = sm_count();
  size_t bytes = 0;
  for (int n = 1; n <= max_rows; ++n)
    for (int mt = 1; mt <= 2; ++mt) {  // either tile size (the bench times both)
      const SplitPlan p = plan_splits(row_tiles(n, group, mt), num_kv_heads, max_position, sms);
      if (p.splits > 1) bytes = std::max(bytes, split_bytes(n, num_heads, head_dim, p.splits));
    }
  return bytes;
}

}  // namespace skim::cuda
