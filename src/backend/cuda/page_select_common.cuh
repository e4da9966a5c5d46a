// Device pieces shared by the page selection kernels (group_page_select.cu, quest_page_select.cu):
// order-preserving keys of the page bounds, and one CTA's top-n of a sequence's page keys by a
// radix select of up to 4 passes (8 bits a pass, histograms in shared memory; it stops once a
// pass's bin holds exactly the keys still needed) with a walk over the kept
// pages in position order (ties at the threshold go to the lower page index, as on the CPU).
#pragma once

#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/warp_transpose_sum.cuh"

namespace skim::cuda::page_select {

constexpr int kThreads = 512;                  // a select CTA
constexpr uint32_t kForcedKey = 0xFF800000u;  // key of +inf: above every finite bound
constexpr uint32_t kNewestKey = 0xFFFFFFFFu;  // the newest page: above the forced ones

// Monotone map of a (non-NaN) float to uint32: a > b exactly when key(a) > key(b).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t bits = __float_as_uint(f);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

__device__ __forceinline__ int pages_of(int len, int page_size) { return (len + page_size - 1) / page_size; }

// Pages one warp scores at a time (all their digest loads in flight together), a score CTA's
// warps, and the score CTAs an SM holds (64 registers a thread). 8 pages a warp in CTAs of 4
// warps, 8 an SM, against 16 pages a warp in CTAs of 8, 2 an SM (128 registers): twice the warps
// to hide one another's scoring behind their loads, and the kernel 5% faster (quest's score
// 30.1 -> 28.3 us at b8 32K, 99.4 -> 97.7 at b8 128K; its whole selection 44.7 -> 43.0 and
// 19.1 -> 18.0 at b1 32K; H100, bench/select_bw.cu, bench/results/2026-11-28-s30-score-shapes/).
// A persistent walk streaming the digests through shared-memory rings by cp.async was slower at
// every shape tried (33-37.5 us at b8 32K: too few warps an SM left to score).
constexpr int kWarpPages = 8;
constexpr int kScoreWarps = 4;
constexpr int kScoreMinCtas = 8;
constexpr int kPagesPerScoreCta = kScoreWarps * kWarpPages;

// Heads of a pooled query whose elements a score warp loads before summing any (one round trip).
constexpr int kQueryLoadsAhead = 4;

// The query of a score warp: lane l holds dims [l*V, l*V+V) of the mean of `count`
// consecutive query heads from `q` (bf16 rows of D), summed in the order the CPU reference
// sums them (so bit-equal); one head (count 1) is its own query exactly. The first
// kQueryLoadsAhead heads' elements load together, one 4- or 8-byte load a head, then are summed
// in order: loaded head by head inside the sum, each head was a round trip of its own (gbsa's
// query pools a group of 4) before the digests could load.
template <int D>
__device__ __forceinline__ void load_query(const uint16_t* q, int count, int lane, float (&qv)[D / 32]) {
  constexpr int V = D / 32;
  static_assert(V == 2 || V == 4, "head_dim 64 or 128");
  using Raw = std::conditional_t<V == 4, uint2, unsigned>;
  const auto raw_of = [&](int g) { return *reinterpret_cast<const Raw*>(q + size_t(g) * D + lane * V); };
  const auto add = [&](const Raw& r) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(&r);
#pragma unroll
    for (int i = 0; i < V; ++i) qv[i] += __uint_as_float(uint32_t(h[i]) << 16) / float(count);  // bf16 -> float
  };
  Raw ahead[kQueryLoadsAhead];
#pragma unroll
  for (int g = 0; g < kQueryLoadsAhead; ++g)
    if (g < count) ahead[g] = raw_of(g);
#pragma unroll
  for (int i = 0; i < V; ++i) qv[i] = 0.0f;
#pragma unroll
  for (int g = 0; g < kQueryLoadsAhead; ++g)
    if (g < count) add(ahead[g]);
  for (int g = kQueryLoadsAhead; g < count; ++g) add(raw_of(g));
}

// The digests of pages p0 .. p0 + kWarpPages - 1 (those < m) of one sequence (their ids from
// lane_page_id) for KV head kvh, held raw in a warp's registers (V/2 words per page and side, all
// loads in flight together), so that several queries can be scored against one load.
template <int D>
struct WarpDigests {
  static constexpr int V = D / 32;
  using Raw = std::conditional_t<V == 4, uint2, unsigned>;
  Raw lo[kWarpPages], hi[kWarpPages];

  // Lane j < kWarpPages: the id of page p0 + j (0 past m), which load() takes: callers issue it
  // first so that its latency overlaps their other loads (the query's) instead of adding to the
  // digests' (table -> digests is a dependent chain).
  static __device__ __forceinline__ int lane_page_id(const int32_t* table, int p0, int m, int lane) {
    return lane < kWarpPages && p0 + lane < m ? __ldg(table + p0 + lane) : 0;
  }

  __device__ __forceinline__ void load(const uint16_t* kmin, const uint16_t* kmax, int num_kv_heads, int kvh,
                                       int my_id, int p0, int m, int lane) {
#pragma unroll
    for (int j = 0; j < kWarpPages; ++j) {
      const int id = __shfl_sync(0xffffffffu, my_id, j);
      const size_t off = (size_t(id) * num_kv_heads + kvh) * D + lane * V;
      lo[j] = hi[j] = Raw{};
      if (p0 + j < m) {
        lo[j] = __ldg(reinterpret_cast<const Raw*>(kmin + off));
        hi[j] = __ldg(reinterpret_cast<const Raw*>(kmax + off));
      }
    }
  }

  // Quest's bound of each page for the query qv: lane j < kWarpPages returns page p0 + j's.
  // Per dim, max(q mn, q mx) is q times mx where q >= 0 and mn elsewhere (mn <= mx, and rounding
  // is monotone, so the product is the same float): one byte permute picks a word's two sides
  // before any conversion. The pages' lane partials are then summed by halving exchanges
  // (warp_transpose_sum.cuh: 9 shuffles for 8 pages, where a butterfly per page takes 40).
  __device__ __forceinline__ float bounds(const float (&qv)[V], int lane) const {
    constexpr int W = V / 2;  // bf16 pairs (32-bit words) per lane and side
    unsigned pick[W];         // __byte_perm selector of each word: mx's half where q >= 0
#pragma unroll
    for (int i = 0; i < W; ++i)
      pick[i] = (qv[2 * i] >= 0.0f ? 0x0054u : 0x0010u) | (qv[2 * i + 1] >= 0.0f ? 0x7600u : 0x3200u);
    float s[kWarpPages];
#pragma unroll
    for (int j = 0; j < kWarpPages; ++j) {
      const unsigned* x = reinterpret_cast<const unsigned*>(&lo[j]);
      const unsigned* y = reinterpret_cast<const unsigned*>(&hi[j]);
      s[j] = 0.0f;
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const unsigned w = __byte_perm(x[i], y[i], pick[i]);
        s[j] += qv[2 * i] * __uint_as_float(w << 16);
        s[j] += qv[2 * i + 1] * __uint_as_float(w & 0xffff0000u);
      }
    }
    const float page_of_pair = transpose_sum(s, lane);  // page lane / 2's bound
    return __shfl_sync(0xffffffffu, page_of_pair, (2 * lane) & 31);
  }
};

// Bounds of pages p0 .. of one sequence for the mean of `count` query heads from `q` against
// KV head kvh's bf16 digests: lane j < kWarpPages returns page p0 + j's bound.
template <int D>
__device__ __forceinline__ float warp_page_bounds(const uint16_t* q, int count, const uint16_t* kmin,
                                                  const uint16_t* kmax, int num_kv_heads, int kvh,
                                                  const int32_t* table, int p0, int m, int lane) {
  const int my_id = WarpDigests<D>::lane_page_id(table, p0, m, lane);  // before the query: see there
  float qv[D / 32];
  load_query<D>(q, count, lane, qv);
  WarpDigests<D> dig;
  dig.load(kmin, kmax, num_kv_heads, kvh, my_id, p0, m, lane);
  return dig.bounds(qv, lane);
}

// Launches a score kernel (per head_dim) over (page blocks, `units`, batch) on the args, as a
// programmatic dependent (the kernels enter with pdl_enter).
template <class Args>
cudaError_t launch_scores(void (*k64)(Args), void (*k128)(Args), const Args& a, int units, cudaStream_t stream) {
  const dim3 grid((a.max_pages_per_seq + kPagesPerScoreCta - 1) / kPagesPerScoreCta, units, a.batch);
  return launch_pdl(a.head_dim == 128 ? k128 : k64, grid, kScoreWarps * 32, 0, stream, a);
}

// Keys of up to this many pages are staged in shared memory (longer sequences read L2),
// at index p + p / 32 so that a thread's run of consecutive keys and a warp's stripe both
// spread over the banks.
constexpr int kSmemKeys = 10240;  // 160K tokens; static shared memory stays under 48 KB
constexpr int kItems = 16;        // consecutive pages per thread in the walk
__device__ __forceinline__ int skew(int p) { return p + (p >> 5); }

// Warp 0 finds the bin (scanning from the top) where the count of keys reaches `need`:
// returns it through *bin and the count of keys in higher bins through *above.
__device__ inline void find_bin(const unsigned* hist, unsigned need, int* bin, unsigned* above) {
  const int lane = threadIdx.x & 31;
  unsigned c[8], sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += (c[j] = hist[255 - 8 * lane - j]);  // lane 0: bins 255..248
  unsigned incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  const unsigned excl = incl - sum;
  const unsigned hit = __ballot_sync(0xffffffffu, incl >= need);
  if (lane == __ffs(hit) - 1) {
    unsigned cum = excl;
    for (int j = 0; j < 8; ++j) {
      if (cum + c[j] >= need) {
        *bin = 255 - 8 * lane - j;
        *above = cum;
        break;
      }
      cum += c[j];
    }
  }
}

// Shared memory of one select CTA: the radix select's scratch, and (SelectSmem) the keys it
// stages.
struct SelectScratch {
  using Scan = cub::BlockScan<int, kThreads>;
  typename Scan::TempStorage scan;
  unsigned hist[256];
  int bin;
  unsigned above;
};
struct SelectSmem : SelectScratch {
  uint32_t keys[kSmemKeys + kSmemKeys / 32];
};

// One radix pass's counts: each key of the m whose resolved bits (mask) equal `prefix` adds
// one to its digit's bin. ITEMS keys a thread loaded before any is counted: from global memory
// (cs's 32K-128K positions) one latency per kItems keys, not per key.
template <int ITEMS, class Key>
__device__ __forceinline__ void count_digits(unsigned* hist, Key key, int m, uint32_t mask, uint32_t prefix,
                                             int shift) {
  // Plain shared-memory atomics: warp-aggregated counting (__match_any_sync, or a loop over
  // the warp's distinct bins) was measured slower on the H100, 29 and 80 us against 17; so
  // was counting zero keys apart for cs, whose untouched positions are all 0 (35.1 against
  // 32.7 us at 32K on the H200).
  for (int base = threadIdx.x; base < m; base += kThreads * ITEMS) {
    uint32_t k[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) k[i] = base + i * kThreads < m ? key(base + i * kThreads) : 0u;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
      if (base + i * kThreads < m && (k[i] & mask) == prefix) atomicAdd(&hist[(k[i] >> shift) & 255u], 1u);
  }
}

// select_top_page_runs (below) over the keys key(p), p < m. RANKS: whether runs needs each run's
// rank among the kept (quest's flags do not: its walk then has no block scan at all).
// STAGED: the keys are in shared memory, where a turn of the count loads 4 keys a thread (a
// 2048-page list, 32K tokens, in one turn). With kItems there, the passes' unrolled turns issued
// 16 keys' instructions a thread, 12 of them predicated off at 32K, and were bound by
// instruction issue (gbsa's select at b8 32K under ncu, H200 2026-11-28); 16 keys a turn where
// the list fills them (8192 pages, 128K) was no faster than 4 turns of 4 (bench/select_bw.cu,
// bench/group_select_bw.cu).
template <bool RANKS, bool STAGED = false, class Key, class Runs>
__device__ void select_top_page_runs_of(SelectScratch& sm, Key key, int m, int n, Runs runs) {
  using Scan = SelectScratch::Scan;
  const int t = threadIdx.x;
  uint32_t prefix = 0, mask = 0;
  unsigned need = unsigned(n);
  bool whole = false;  // the threshold's bin held exactly the keys still needed
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = t; i < 256; i += kThreads) sm.hist[i] = 0;
    __syncthreads();
    count_digits<STAGED ? 4 : kItems>(sm.hist, key, m, mask, prefix, shift);
    __syncthreads();
    if (t < 32) find_bin(sm.hist, need, &sm.bin, &sm.above);
    __syncthreads();
    prefix |= uint32_t(sm.bin) << shift;
    mask |= 255u << shift;
    need -= sm.above;
    // The bin holds exactly the keys still needed: every key whose resolved bits equal the
    // prefix is kept, whatever its lower bits, so the passes left cannot change the set (the
    // same top n, ties included). Random scores mostly resolve after two passes of four.
    // Tried and dropped (H100, 2026-11-28, bench/results/2026-11-28-s29-art-verdict-warp/): the
    // keys' shared leading bits (an AND/OR pre-pass) resolved first, to save the pass spent on
    // the sign and exponent: 1.3 us off quest's select alone at b8 32K, but end to end quest
    // +0.2% and gbsa -0.1%, not worth a pre-pass and a digit that may reach below bit 0.
    whole = sm.hist[sm.bin] == need;
    __syncthreads();  // hist and bin are rewritten next pass
    if (whole) break;
  }
  // The n-th largest key's resolved bits (`mask`); `need` of the keys that share them are kept:
  // all of them where the bin held exactly those (`whole`, CTA-uniform: the usual case), else the
  // first `need` in position order, ranked by a block scan (ties in the whole 32-bit key).
  const uint32_t threshold = prefix;

  // Each thread owns kItems consecutive pages of a tile, so thread order is position order.
  int eq_before = 0, written = 0;
  for (int base = 0; base < m; base += kThreads * kItems) {
    const int p0 = base + t * kItems;
    uint32_t k[kItems];
    int eq = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      k[i] = p0 + i < m ? key(p0 + i) & mask : 0u;
      eq += p0 + i < m && k[i] == threshold;
    }
    int eq_rank = 0, eq_total = 0;
    if (!whole) {
      Scan(sm.scan).ExclusiveSum(eq, eq_rank, eq_total);
      __syncthreads();
    }
    unsigned keep_bits = 0;
    int rank = eq_before + eq_rank;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const bool in = p0 + i < m;
      const bool keep = in && (k[i] > threshold || (k[i] == threshold && (whole || rank++ < int(need))));
      keep_bits |= unsigned(keep) << i;
    }
    int pos = 0, kept_total = 0;
    if constexpr (RANKS) {
      Scan(sm.scan).ExclusiveSum(__popc(keep_bits), pos, kept_total);
      __syncthreads();
    }
    if (p0 < m) runs(p0, keep_bits, written + pos);
    eq_before += eq_total;
    written += kept_total;
  }
}

// select_top_pages_of (below) page by page: kept(p, rank) and skipped(p) of each page of a run.
template <class Kept, class Skipped>
struct PerPage {
  int m;
  Kept kept;
  Skipped skipped;
  __device__ __forceinline__ void operator()(int p0, unsigned keep_bits, int rank) const {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (keep_bits >> i & 1u) kept(p0 + i, rank++);
      else if (p0 + i < m) skipped(p0 + i);
    }
  }
};

template <class Key, class Kept, class Skipped>
__device__ void select_top_pages_of(SelectScratch& sm, Key key, int m, int n, Kept kept, Skipped skipped) {
  select_top_page_runs_of<true>(sm, key, m, n, PerPage<Kept, Skipped>{m, kept, skipped});
}

// The CTA's top n of the m keys in `keys` (global; staged in shared memory when they fit):
// select_top_pages calls kept(p, rank) for each kept page p in position order, rank its index
// among the kept, and skipped(p) for the others; select_top_page_runs hands each thread's run of
// kItems consecutive pages at once, runs(p0, keep_bits, rank) (bit i: page p0 + i kept; rank:
// the first kept one's index among the kept), so that a run's outputs can be stored together:
// quest's 16 flags of a run as one 16-byte store instead of 16 byte stores took its select from
// 29.0 to 17.4 us at b8 128K (8B shape, H100, bench/select_bw.cu). Every thread of the CTA calls
// it. The two key sources are separate instantiations: a per-key choice between them inside the
// passes cost the selection (the kernel before the shared pieces had its loops unswitched on it).
template <bool RANKS = true, class Runs>
__device__ void select_top_page_runs(SelectSmem& sm, const uint32_t* keys, int m, int n, Runs runs) {
  if (m <= kSmemKeys) {
    for (int p = threadIdx.x; p < m; p += kThreads) sm.keys[skew(p)] = keys[p];
    select_top_page_runs_of<RANKS, true>(sm, [&](int p) { return sm.keys[skew(p)]; }, m, n, runs);
  } else {
    select_top_page_runs_of<RANKS>(sm, [&](int p) { return keys[p]; }, m, n, runs);
  }
}

template <class Kept, class Skipped>
__device__ void select_top_pages(SelectSmem& sm, const uint32_t* keys, int m, int n, Kept kept, Skipped skipped) {
  select_top_page_runs<true>(sm, keys, m, n, PerPage<Kept, Skipped>{m, kept, skipped});
}

}  // namespace skim::cuda::page_select
