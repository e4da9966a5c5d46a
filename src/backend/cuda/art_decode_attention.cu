// ART decode attention kernel (see art_decode_attention.cuh). It reuses the paged decode
// kernel's page pipeline and arithmetic (paged_decode_attention_impl.cuh: copy, QK^T, online
// softmax, PV, the CTA merge and the chunk merge kernel); what it adds is the traversal:
//
//  * Blocks. A list's pages are cut into blocks of kArtBlockPages; block j goes to warp
//    j mod T of the T = chunks x WARPS warps of the list (a warp walks its blocks in order,
//    two pages in flight). Each warp keeps two states: the block's own (reset per block) and
//    its running sum, merged at each block's end (merging, never subtracting).
//  * Rounds. Round r is blocks [r B, r B + B), B = the list's round (art_list_round_pages: the
//    rule's round_pages / 4, longer in a long list; the launch's round, the shortest, sizes the
//    workspace, and the lag is scaled to the same reach in blocks). At a block's end the warp
//    writes the block's probe state (per query head: max, denominator and the 32 probe
//    elements, unnormalised) and counts it into its round (the next page's copy already out).
//  * Verdicts (verdict_warp). The verdict on round r tests the prefix state after it against the
//    one before, per head; the list stops at the first round where every head has been stable
//    `patience` times in a row. A head no page of the list attends counts stable, as in the
//    reference, where the plan gives ArtDecodeArgs::heads_listed (the kernel does not scan the
//    masks; mac+art's `below` lists have such heads). The test sits in the masked kernels only.
//    One warp computes every verdict of a list: the verdict warp of its first CTA (the eighth
//    warp, which reads no page), in round order as the rounds come in, keeping the prefix states
//    in registers (one L2 round trip a verdict for the round's blocks, four heads at a time:
//    merge_heads). Its merges run in a fixed order, so every run reads the same pages whatever
//    the timing. (Session 29's form merged prefixes from round states and checkpoints in the
//    workspace, computed by whichever warp first needed them, reading warps at their gates
//    included: three or four serial round trips a verdict, the pace of the whole kernel where
//    rounds came faster, and 124 bytes of spills in the masked kernel from the merges inlined
//    into the reading warps.)
//  * The gate (WarpGate). Before its first page of a block in round r > lag, a warp needs the
//    verdicts up to round r - lag - 1 and stops if one of them stopped the list. The lag is at
//    least the distance between a warp's consecutive blocks in rounds, so a warp never waits on
//    a round it still has pages of in flight; every CTA of a launch is resident at once (the
//    plan fills at most one wave), so every wait ends (and one that does not traps).
//  * The last warp of a list to finish (verdict warps included) resets the list's counters and
//    adds to the stats.
#include "backend/cuda/art_decode_attention.cuh"

#include "backend/cuda/paged_decode_attention_impl.cuh"

namespace skim::cuda {

namespace {

using detail::kPageSize;
using detail::SplitConfig;
using detail::SplitParams;

// A CTA's warps: kWarps reading warps, then its verdict warp (verdict_warp), 256 threads in all.
// (Eight reading warps and a ninth left 168 registers a thread: an SM sub-partition holds 16K
// registers and one of them would hold three warps; the kernel spilled 900 bytes.)
constexpr int kWarps = 7, kStages = 2;
constexpr int kThreadsPerCta = (kWarps + 1) * 32;
// A probe state per head: probe[32] (unnormalised), m, l, two floats of padding so that each
// state starts 16-byte aligned (the merges read the probe as float4).
constexpr int kStateFloats = kArtProbe + 4;
constexpr int kMaxMergeItems = 32;  // states one merge takes: a round's blocks (<= 32)
// Rounds of lag beyond the least the kernel needs (art_decode_lag): time for the verdicts.
constexpr int kLagSlack = 2;

struct ArtKernelParams {
  SplitParams sp;  // tables_per_seq = num_kv_heads, sub_groups = 1
  int round_blocks, lag, patience;
  float eps_scale, eps_dir;
  int max_rounds, max_blocks;
  const int32_t* row_policy;  // with rules: row b follows rules[row_policy[b]] (ArtRowRule)
  const ArtRowRule* rules;
  // Per list, zero between calls: [0] warps done, [1] pages read, then one int per round: blocks
  // done (arrive), then one per round: its verdict (0 untested, 1 unstable, 2 stable).
  int* ints;
  int ints_per_list;
  float* blocks;       // [lists][max_blocks][kArtMaxGroup][kStateFloats]
  ArtDecodeStats* stats;
  const uint32_t* heads_listed;  // ArtDecodeArgs::heads_listed (masked lists only)
};

__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Orders this thread's writes before a flag another CTA reads (with __syncwarp, the warp's).
__device__ __forceinline__ void fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// *p += v, released: this thread's writes (with __syncwarp, the warp's) before it, as fence_gpu
// then an atomic, without the fence's acquire half (an L1 invalidation, CCTL.IVALL, on sm_90).
__device__ __forceinline__ void add_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ float4 fma4(float4 a, float w, float4 acc) {
  return make_float4(fmaf(a.x, w, acc.x), fmaf(a.y, w, acc.y), fmaf(a.z, w, acc.z), fmaf(a.w, w, acc.w));
}
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// The heads one merge pass holds: lane l has probe elements 4 (l % 8) .. + 3 of head
// g0 + l / 8, so a pass merges four heads' states with one round of loads.
constexpr int kPassHeads = 4;

// A head's probe state as the warp holds it after a merge pass: lane l has head g0 + l / 8's
// probe elements 4 (l % 8) .. + 3, and its m and l (every lane of the head).
struct HeadState {
  float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float m = -INFINITY, l = 0.0f;
  // The normalised probe's norm and its dot product with another's (over the 8 chunk lanes).
  __device__ float4 normalised() const {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    return make_float4(x.x * inv, x.y * inv, x.z * inv, x.w * inv);
  }
};

__device__ __forceinline__ float chunk_sum(float v) {  // over the 8 lanes holding one probe
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v + __shfl_xor_sync(0xffffffffu, v, 4);
}
__device__ __forceinline__ float chunk_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
}

// Merges the states at(0, g) .. at(n - 1, g) (n <= kMaxMergeItems) of the heads g0 .. g0 + 3
// (those below rows) at once: lane l loads m and l of items l % 8, + 8, + 16, + 24 of its head
// and its probe chunk of every item, in batches of 8 items (one L2 round trip for a round of at
// most 8 blocks; the heads one after another took a round trip each). The sums run in a fixed
// order, so the same states give the same bits: that keeps the verdicts, and so the pages read,
// reproducible.
template <class At>
__device__ __forceinline__ HeadState merge_heads(At at, int n, int g0, int rows, int lane) {
  const int g = g0 + (lane >> 3), c = lane & 7, head_lanes = lane & ~7;
  const bool live = g < rows;
  float mi[kMaxMergeItems / 8], li[kMaxMergeItems / 8];
  float4 xs[8];
#pragma unroll
  for (int t = 0; t < kMaxMergeItems / 8; ++t) {
    const int i = c + 8 * t;
    mi[t] = live && i < n ? __ldcg(at(i, g) + kArtProbe) : -INFINITY;
    li[t] = live && i < n ? __ldcg(at(i, g) + kArtProbe + 1) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
    xs[i] = live && i < n ? __ldcg(reinterpret_cast<const float4*>(at(i, g)) + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float m_all = -INFINITY;
#pragma unroll
  for (int t = 0; t < kMaxMergeItems / 8; ++t) m_all = fmaxf(m_all, mi[t]);
  m_all = chunk_max(m_all);
  float wa[kMaxMergeItems / 8], la = 0.0f;
#pragma unroll
  for (int t = 0; t < kMaxMergeItems / 8; ++t) {
    wa[t] = mi[t] == -INFINITY ? 0.0f : exp2f(mi[t] - m_all);
    la += li[t] * wa[t];
  }
  float4 xa = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int t = 0; t < kMaxMergeItems / 8; ++t) {
    if (8 * t >= n) break;  // n is the warp's: every lane leaves together
    if (t > 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        xs[i] = live && 8 * t + i < n ? __ldcg(reinterpret_cast<const float4*>(at(8 * t + i, g)) + c)
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) xa = fma4(xs[i], __shfl_sync(0xffffffffu, wa[t], head_lanes | i), xa);
  }
  HeadState all;
  all.x = xa;
  all.m = m_all;
  all.l = chunk_sum(la);
  return all;
}

// Waits until *counter >= n. Every wait ends by construction (see the kernel); one that has
// not after about a second traps, so a bug surfaces as a launch error rather than a hung GPU.
__device__ __forceinline__ void wait_count(const int* counter, int n) {
  for (int spins = 0; ld_acquire(counter) < n; ++spins) {
    if (spins == (1 << 24)) __trap();
    __nanosleep(32);
  }
}

// One list's traversal state in the workspace, and the rules of its rounds.
//
// The verdicts are the verdict warp's alone (below): it merges each round's block states into
// the prefix state it keeps in registers, in round order, so a verdict costs one L2 round trip
// for the round's blocks and a store. The reading warps only wait for verdicts at their gates.
// (Before, prefix states were merged from round states and checkpoints in the workspace by
// whichever warp first needed them: three or four serial round trips and fences a verdict, which
// set the pace wherever rounds go by faster than that, e.g. quest's lists at b8 32K, where
// ART's kernel took 173 us against the paged kernel's 115, H100 2026-11-28.)
// MASKED: the list's pages carry per-head masks, so a head may have no page in it.
template <bool MASKED>
struct ListState {
  const ArtKernelParams* p;
  size_t list;
  int n_pages, n_blocks, n_rounds, rows;
  // The list's rule (the launch's, or its row's ArtRowRule); an inactive list is read whole.
  bool active;
  int round_blocks, lag, patience;
  float eps_scale, eps_dir;

  __device__ int* done() const { return p->ints + list * p->ints_per_list; }
  __device__ int* pages_read() const { return done() + 1; }
  __device__ int* arrive() const { return done() + 2; }
  __device__ int* verdict() const { return arrive() + p->max_rounds; }
  __device__ __forceinline__ float* block(int b, int g) const {
    return p->blocks + ((list * p->max_blocks + b) * kArtMaxGroup + g) * kStateFloats;
  }
  __device__ int blocks_in_round(int r) const { return min(round_blocks, n_blocks - r * round_blocks); }

  // The verdicts of rounds [from, to] (to < n_rounds - 1, rounds this warp knows are read: they
  // precede a block it has read), counting consecutive stable rounds in `run`: the first round
  // where the run reaches patience, or -1. The lanes load a window of 32 verdicts at once and
  // the warp walks the ones known, in order, waiting where one is not yet out (never past a
  // stop: the verdict warp computes none after it).
  __device__ __forceinline__ int scan_verdicts(int from, int to, int& run, int lane) const {
    for (int s = from; s <= to; s += 32) {
      const int n = min(32, to - s + 1);
      for (int i = 0, spins = 0; i < n; ++spins) {
        const int v = lane < n ? ld_acquire(verdict() + s + lane) : 2;
        const unsigned stable = __ballot_sync(0xffffffffu, v == 2);
        const unsigned pending = __ballot_sync(0xffffffffu, v == 0);
        const int known = pending ? __ffs(pending) - 1 : n;  // verdicts [0, known) are out
        for (; i < known; ++i) {
          run = (stable >> i & 1u) ? run + 1 : 0;
          if (run >= patience) return s + i;
        }
        if (i < n) {
          if (spins == (1 << 24)) __trap();
          __nanosleep(32);
        }
      }
    }
    return -1;
  }

  // The last warp of the list: stats, then every counter back to zero for the next call.
  __device__ __forceinline__ void finish(int lane) const {
    const int read = ld_acquire(pages_read());
    for (int i = lane; i < p->ints_per_list; i += 32) done()[i] = 0;
    if (lane == 0 && p->stats && active) {
      atomicAdd(&p->stats->lists, 1ull);
      atomicAdd(&p->stats->stopped, read < n_pages ? 1ull : 0ull);
      atomicAdd(&p->stats->pages_listed, (unsigned long long)n_pages);
      atomicAdd(&p->stats->pages_read, (unsigned long long)read);
    }
  }
};

// a and b merged (the log-sum-exp merge of two probe states, in the exp2 domain).
__device__ __forceinline__ HeadState merge_two(const HeadState& a, const HeadState& b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;
  const float wa = a.m == -INFINITY ? 0.0f : exp2f(a.m - m), wb = b.m == -INFINITY ? 0.0f : exp2f(b.m - m);
  HeadState s;
  s.x = fma4(b.x, wb, make_float4(a.x.x * wa, a.x.y * wa, a.x.z * wa, a.x.w * wa));
  s.m = m;
  s.l = a.l * wa + b.l * wb;
  return s;
}

// Whether head g0 + lane / 8's state is stable from prev to cur: the relative change of the
// normalised probe's norm under eps_scale and 1 - cos under eps_dir (an empty state never is).
__device__ __forceinline__ bool probe_stable(const HeadState& prev, const HeadState& cur, float eps_scale,
                                             float eps_dir) {
  const float4 c = cur.normalised(), q = prev.normalised();
  const float norm = sqrtf(chunk_sum(dot4(c, c))), prev_norm = sqrtf(chunk_sum(dot4(q, q)));
  const float dot = chunk_sum(dot4(q, c));
  return prev_norm > 0.0f && norm > 0.0f && fabsf(norm - prev_norm) / prev_norm < eps_scale &&
         1.0f - dot / (norm * prev_norm) < eps_dir;
}

// The verdict warp of a list's first CTA: every verdict, in round order, each as soon as its
// round's blocks are in. It keeps the prefix state of every head (two passes of four) in
// registers: the prefix after round r is the one before it merged with round r's state (its
// blocks merged in block order), so every run computes the same bits and reads the same pages.
// A head no page of the list attends keeps an empty state, never stable by the test: it counts
// stable (as in cpu::art_decode_attention, art_heads_listed), where the plan gives
// ArtDecodeArgs::heads_listed (masked lists only: mac+art's `below`). Stops at the list's stop,
// or at the last verdict a gate reads (round n_rounds - lag - 2).
template <bool MASKED>
__device__ void verdict_warp(const ListState<MASKED>& ls, int lane) {
  if (!ls.active) return;
  const ArtKernelParams& p = *ls.p;
  const unsigned unlisted =
      MASKED && p.heads_listed ? ~p.heads_listed[ls.list] & ((ls.rows >= 32 ? 0u : 1u << ls.rows) - 1u) : 0u;
  const int last = min(ls.n_rounds - 2, ls.n_rounds - ls.lag - 2);
  constexpr int kPasses = kArtMaxGroup / kPassHeads;
  HeadState prefix[kPasses];
  int run = 0;
  for (int r = 0; r <= last; ++r) {
    if (lane == 0) wait_count(ls.arrive() + r, ls.blocks_in_round(r));
    __syncwarp();
    fence_gpu();
    const int b0 = r * ls.round_blocks, n = ls.blocks_in_round(r);
    bool all = true;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int g0 = pass * kPassHeads, g = g0 + (lane >> 3);
      if (g0 >= ls.rows) break;  // the warp's: every lane leaves together
      const HeadState round = merge_heads([&](int i, int h) -> const float* { return ls.block(b0 + i, h); }, n, g0,
                                          ls.rows, lane);
      const HeadState cur = merge_two(prefix[pass], round);
      // Every lane runs the test (its sums shuffle across the warp), then the rule for heads past
      // the group or without pages.
      const bool tested = probe_stable(prefix[pass], cur, ls.eps_scale, ls.eps_dir);
      const bool stable = g >= ls.rows || ((unlisted >> g) & 1u) != 0u || tested;
      all = __all_sync(0xffffffffu, stable) && all;
      prefix[pass] = cur;
    }
    if (lane == 0) st_release(ls.verdict() + r, all ? 2 : 1);
    run = all ? run + 1 : 0;
    if (run >= ls.patience) return;
  }
}

// The round of a warp's k-th block, (gw + k T) / round_blocks, stepped block by block without a
// division (an integer division is some 30 instructions: two a block were in each warp's loop).
struct RoundWalk {
  int round, rem, step, step_rem, per;
  __device__ RoundWalk(int gw, int total_warps, int round_blocks)
      : round(gw / round_blocks), rem(gw % round_blocks), step(total_warps / round_blocks),
        step_rem(total_warps % round_blocks), per(round_blocks) {}
  __device__ void next() {
    round += step;
    rem += step_rem;
    if (rem >= per) {
      rem -= per;
      ++round;
    }
  }
};

// A warp's view of the verdicts: whether it may read blocks of round r, i.e. whether no round
// up to r - lag - 1 stopped the list (rounds are scanned once, in order, as the warp needs them).
struct WarpGate {
  int scanned = 0, run = 0, stop = -1;
  template <bool MASKED>
  __device__ __forceinline__ bool may_read(const ListState<MASKED>& ls, int r, int lane) {
    if (!ls.active) return true;
    const int decided = r - ls.lag - 1;
    if (stop < 0 && decided >= scanned) {
      stop = ls.scan_verdicts(scanned, decided, run, lane);
      scanned = decided + 1;
    }
    return stop < 0 || r <= stop + ls.lag;
  }
};

// A warp's blocks of its list: block j = gw + k T for k = 0, 1, ...; the ids (and masks) of
// its current and next block are loaded one block ahead.
template <bool MASKED>
struct WarpBlocks {
  const int32_t* table;
  const uint32_t* masks;
  int n_pages, total_warps, gw, lane;
  int k = 0;  // this warp's block count so far
  int cur_ids = 0, nxt_ids = 0;
  uint32_t cur_masks = ~0u, nxt_masks = ~0u;

  __device__ int block(int kk) const { return gw + kk * total_warps; }
  __device__ __forceinline__ int load_id(int j) const {
    const int pg = j * kArtBlockPages + lane;
    return lane < kArtBlockPages && pg < n_pages ? __ldg(table + pg) : 0;
  }
  __device__ uint32_t load_mask(int j) const {
    if constexpr (!MASKED) return ~0u;
    const int pg = j * kArtBlockPages + lane;
    return lane < kArtBlockPages && pg < n_pages ? __ldg(masks + pg) : 0u;
  }
  __device__ void start() {
    cur_ids = load_id(block(0));
    nxt_ids = load_id(block(1));
    cur_masks = load_mask(block(0));
    nxt_masks = load_mask(block(1));
  }
  __device__ void advance() {
    ++k;
    cur_ids = nxt_ids;
    cur_masks = nxt_masks;
    nxt_ids = load_id(block(k + 1));
    nxt_masks = load_mask(block(k + 1));
  }
};

// A warp done with the list: its pages read into the count; the last of the list's warps
// (reading and verdict warps alike: a verdict warp may still read the counters) resets them.
template <bool MASKED>
__device__ __forceinline__ void count_out(const ListState<MASKED>& ls, int participants, int pages, int lane) {
  int last = 0;
  __syncwarp();
  if (lane == 0) {
    if (pages) atomicAdd(ls.pages_read(), pages);
    fence_gpu();
    last = atomicAdd(ls.done(), 1) + 1 == participants;
  }
  if (__shfl_sync(0xffffffffu, last, 0)) {
    fence_gpu();
    ls.finish(lane);
  }
}

template <int D, bool MASKED>
__global__ void __launch_bounds__(kThreadsPerCta, 1) art_split_kernel(const ArtKernelParams p) {
  using C = SplitConfig<D, kWarps, kStages>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint32_t stage_mask[kWarps][kStages];  // the page's head mask (MASKED only)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = lane >> 2, quad = lane & 3;
  const int chunk = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const SplitParams& sp = p.sp;
  const int rows = sp.group, hq0 = kvh * sp.group;

  detail::pdl_wait();
  detail::pdl_launch_dependents();

  const size_t list = size_t(b) * sp.num_kv_heads + kvh;
  const int len = min(max(sp.seq_lens[list], 0), sp.max_pages_per_seq * kPageSize);
  uint32_t qf[D / 16][2];
  detail::load_q_fragments<D>(sp, b, hq0, rows, row, quad, qf);
  ListState<MASKED> ls{&p, list, (len + kPageSize - 1) / kPageSize, 0, 0, rows,
               true, p.round_blocks, p.lag, p.patience, p.eps_scale, p.eps_dir};
  if (p.rules) {
    const ArtRowRule r = p.rules[p.row_policy[b]];
    ls.active = r.active != 0;
    ls.round_blocks = max(r.round_pages / kArtBlockPages, p.round_blocks);
    ls.lag = max(r.lag_rounds, p.lag);
    ls.patience = r.patience;
    ls.eps_scale = r.eps_scale;
    ls.eps_dir = r.eps_dir;
  }
  ls.n_blocks = (ls.n_pages + kArtBlockPages - 1) / kArtBlockPages;
  {  // a long list's rounds are longer (art_list_round_pages), its lag the same reach in blocks
    const int rule_blocks = ls.round_blocks;
    ls.round_blocks = art_list_round_pages(rule_blocks * kArtBlockPages, ls.n_pages, kArtBlockPages) / kArtBlockPages;
    ls.lag = art_list_lag(ls.lag, rule_blocks, ls.round_blocks);
  }
  ls.n_rounds = (ls.n_blocks + ls.round_blocks - 1) / ls.round_blocks;
  const int participants = int(gridDim.x) * (kWarps + 1);  // every warp of the list's CTAs
  if (warp == kWarps) {  // the verdict warp: the first CTA's works, the others' only count out
    if (chunk == 0) verdict_warp(ls, lane);
    count_out(ls, participants, 0, lane);
    return;
  }
  // The partial page: listed first by ART's lists, last by an inactive row's (paged decode's).
  const int partial_valid = len - (ls.n_pages - 1) * kPageSize, partial = ls.active ? 0 : ls.n_pages - 1;
  WarpGate gate;
  WarpBlocks<MASKED> wb{.table = sp.page_table + list * sp.max_pages_per_seq,
                        .masks = MASKED ? sp.head_masks + list * sp.max_pages_per_seq : nullptr,
                        .n_pages = ls.n_pages, .total_warps = int(gridDim.x) * kWarps,
                        .gw = chunk * kWarps + warp, .lane = lane};
  wb.start();
  RoundWalk issue_round(wb.gw, wb.total_warps, ls.round_blocks), read_round = issue_round;  // issued, read

  unsigned char* wbuf = smem + warp * C::kWarpBytes;
  const uint32_t wbuf_s = detail::smem_addr(wbuf);
  const uint16_t* kbase = sp.k + size_t(kvh) * sp.head_stride;
  const uint16_t* vbase = sp.v + size_t(kvh) * sp.head_stride;

  // Copies this warp's i-th page (page i % 4 of its (i / 4)-th block) into stage i % kStages;
  // at a block's first page it passes the gate. Always commits a group.
  int n_issued = 0;
  bool done = false;
  auto issue = [&](int i) {
    const int pos = i % kArtBlockPages;
    if (!done && pos == 0 && i > 0) {
      wb.advance();
      issue_round.next();
    }
    const int j = wb.block(wb.k), page = j * kArtBlockPages + pos;
    if (!done && (page >= ls.n_pages || (pos == 0 && !gate.may_read(ls, issue_round.round, lane)))) done = true;
    if (!done) {
      ++n_issued;
      const int s = i % kStages;
      const int id = __shfl_sync(0xffffffffu, wb.cur_ids, pos);
      const uint32_t mask = MASKED ? __shfl_sync(0xffffffffu, wb.cur_masks, pos) : ~0u;
      if (MASKED && lane == 0) stage_mask[warp][s] = mask;
      detail::copy_page_async<C>(kbase, vbase, size_t(id) * sp.page_stride, page == partial ? partial_valid : kPageSize,
                                 wbuf_s + s * C::kStageBytes, lane);
    }
    detail::cp_async_commit();
  };
  for (int s = 0; s < kStages; ++s) issue(s);

  float m_blk = -INFINITY, l_blk = 0.0f, acc[D / 8][2];  // the current block's state
  float m_sum = -INFINITY, l_sum = 0.0f, sum[D / 8][2];  // the warp's running state
#pragma unroll
  for (int t = 0; t < D / 8; ++t) acc[t][0] = acc[t][1] = sum[t][0] = sum[t][1] = 0.0f;

  for (int i = 0; i < n_issued; ++i) {
    detail::cp_async_wait<kStages - 1>();
    __syncwarp();
    const int s = i % kStages;
    const uint32_t ks = wbuf_s + s * C::kStageBytes;
    float sc[4], pr[4];
    detail::compute_qk<C, D>(qf, ks, lane, sp.scale_log2, sc);
    // Page i is page i % kArtBlockPages of the warp's (i / kArtBlockPages)-th block (issue reads
    // them in that order): its place is computed, warp-uniform, where it was staged through
    // shared memory (a store and a load in each page's dependency chain).
    const int j = wb.block(i / kArtBlockPages), page = j * kArtBlockPages + i % kArtBlockPages;
    const bool attends = !MASKED || (stage_mask[warp][s] >> row & 1u);
    detail::update_softmax_state<D, MASKED>(sc, page == partial ? partial_valid : kPageSize, attends, quad, m_blk,
                                            l_blk, acc, pr);
    detail::compute_pv<C, D>(pr, ks + C::kPageBytes, lane, acc);
    const int ended = i % kArtBlockPages == kArtBlockPages - 1 || page == ls.n_pages - 1 ? j : -1;  // a block's end
    __syncwarp();
    // The next copy goes out before the block's bookkeeping, whose atomics and fence would
    // otherwise leave the pipeline idle. Its gate waits only on rounds before this block's
    // (the lag is at least the rounds between a warp's blocks), so this block need not be in.
    issue(i + kStages);
    if (ended >= 0) {
      // The block's probe state out, then merged into the warp's sum and cleared.
      const float l_quad = l_blk + __shfl_xor_sync(0xffffffffu, l_blk, 1);
      const float l_all = l_quad + __shfl_xor_sync(0xffffffffu, l_quad, 2);
      if (row < rows) {
        // A state is 16-byte aligned (kStateFloats): the lane's 8 probe elements go out as two
        // 16-byte stores, m and l as one 8-byte store (fewer stores for the release to wait on).
        float* part = ls.block(ended, row);
        constexpr int E = D / 64;  // the probe takes every E-th of the lane's accumulator tiles
        float4* probe = reinterpret_cast<float4*>(part + quad * 8);
        probe[0] = make_float4(acc[0][0], acc[E][0], acc[2 * E][0], acc[3 * E][0]);
        probe[1] = make_float4(acc[4 * E][0], acc[5 * E][0], acc[6 * E][0], acc[7 * E][0]);
        if (quad == 0) *reinterpret_cast<float2*>(part + kArtProbe) = make_float2(m_blk, l_all);
      }
      const float mn = fmaxf(m_sum, m_blk);
      if (mn != -INFINITY) {
        const float wa = exp2f(m_sum - mn), wb2 = exp2f(m_blk - mn);
#pragma unroll
        for (int t = 0; t < D / 8; ++t) {
          sum[t][0] = sum[t][0] * wa + acc[t][0] * wb2;
          sum[t][1] = sum[t][1] * wa + acc[t][1] * wb2;
        }
        l_sum = l_sum * wa + l_blk * wb2;
        m_sum = mn;
      }
      m_blk = -INFINITY;
      l_blk = 0.0f;
#pragma unroll
      for (int t = 0; t < D / 8; ++t) acc[t][0] = acc[t][1] = 0.0f;
      __syncwarp();  // the lanes' probe writes, then lane 0's release publishes them all
      if (lane == 0) add_release(ls.arrive() + read_round.round, 1);
      read_round.next();
    }
  }
  detail::cp_async_wait<0>();

  l_sum += __shfl_xor_sync(0xffffffffu, l_sum, 1);
  l_sum += __shfl_xor_sync(0xffffffffu, l_sum, 2);
  __syncwarp();
  detail::store_warp_state<D>(reinterpret_cast<float*>(wbuf), sum, m_sum, l_sum, row, quad);
  // The reading warps only (named barrier 1): the verdict warp goes its own way.
  asm volatile("bar.sync 1, %0;" ::"r"(kWarps * 32) : "memory");
  detail::merge_warp_states<C, D, kWarps>(smem, sp, b, hq0, rows, chunk);
  count_out(ls, participants, n_issued, lane);
}

// The workspace: the paged decode split's region (chunk partials), then per list its ints
// (ArtKernelParams::ints) and block probe states.
struct ArtLayout {
  size_t ints, blocks, bytes;
  int max_rounds, max_blocks, ints_per_list;
};

ArtLayout art_layout(const ArtDecodeArgs& a, size_t split_bytes) {
  const PagedDecodeArgs& at = a.attn;
  const size_t lists = size_t(at.batch) * at.num_kv_heads, head_states = size_t(kArtMaxGroup) * kStateFloats * 4;
  ArtLayout l;
  l.max_blocks = (at.max_pages_per_seq + kArtBlockPages - 1) / kArtBlockPages;
  const int round_blocks = a.art.round_pages / kArtBlockPages;
  l.max_rounds = round_blocks > 0 ? (l.max_blocks + round_blocks - 1) / round_blocks : 0;
  l.ints_per_list = 2 + 2 * l.max_rounds;
  l.ints = detail::align_up(split_bytes, 256);
  l.blocks = l.ints + detail::align_up(lists * l.ints_per_list * 4, 256);
  l.bytes = l.blocks + detail::align_up(lists * l.max_blocks * head_states, 256);
  return l;
}

bool art_supported(const ArtDecodeArgs& a) {
  const PagedDecodeArgs& at = a.attn;
  return detail::supported(at) && at.tables_per_kv_head && at.group_size() <= kArtMaxGroup &&
         a.art.round_pages > 0 && a.art.round_pages % kArtBlockPages == 0 &&
         a.art.round_pages <= kMaxMergeItems * kArtBlockPages && a.art.patience >= 1 &&
         a.art.lag_rounds >= 0;
}

template <int D>
struct ArtVariant {
  using C = SplitConfig<D, kWarps, kStages>;
  using Split = detail::Variant<D, kWarps, kStages>;  // its pages per CTA

  // Sets the kernels' attributes once per device and returns how many CTAs the machine holds
  // at once. Every CTA of a launch must be resident together (warps wait on each other's
  // rounds): the plan fills at most this many.
  static cudaError_t capacity(int& cap) {
    static detail::PerDevice<int> cache;
    return cache.get(cap, [](int, int& c) {
      int per_sm = 1 << 30;
      for (const void* f : {reinterpret_cast<const void*>(art_split_kernel<D, false>),
                            reinterpret_cast<const void*>(art_split_kernel<D, true>)}) {
        cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
        if (e == cudaSuccess)
          e = cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
        int n = 0;
        if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, kThreadsPerCta, C::kSmemBytes);
        if (e != cudaSuccess) return e;
        per_sm = std::min(per_sm, n);
      }
      if (per_sm < 1) return cudaErrorInvalidConfiguration;
      detail::DeviceInfo info;
      const cudaError_t e = detail::device_info(info);
      c = info.sms * per_sm;
      return e;
    });
  }

  static cudaError_t plan(const ArtDecodeArgs& a, detail::Plan& plan) {
    int cap = 0;
    const cudaError_t e = capacity(cap);
    if (e != cudaSuccess) return e;
    plan = detail::make_plan(a.attn, cap, Split::kMinChunkPages);
    if (a.art.max_warps > 0 && plan.num_chunks * kWarps > a.art.max_warps) {  // fewer CTAs per list
      plan.num_chunks = std::max(1, a.art.max_warps / kWarps);
      plan.direct = plan.num_chunks == 1;
      const int pages = (std::max(a.attn.max_seq_len, 1) + kPageSize - 1) / kPageSize;
      plan.chunk_pages = (pages + plan.num_chunks - 1) / plan.num_chunks;
    }
    return cudaSuccess;
  }

  // The rounds between a warp's consecutive blocks (so it never waits on its own round), plus
  // kLagSlack for the verdicts to come while the warps read on.
  static int lag(const detail::Plan& plan, const ArtDecodeArgs& a) {
    const int warps = plan.num_chunks * kWarps, round_blocks = a.art.round_pages / kArtBlockPages;
    return (warps + round_blocks - 1) / round_blocks + kLagSlack;
  }

  static cudaError_t split_bytes(const ArtDecodeArgs& a, size_t& bytes) {
    int cap = 0;
    const cudaError_t e = capacity(cap);
    if (e == cudaSuccess) bytes = std::max(detail::max_workspace_bytes(a.attn, cap), detail::kCounterBytes);
    return e;
  }

  static cudaError_t workspace_size(const ArtDecodeArgs& a, size_t& bytes) {
    size_t split = 0;
    const cudaError_t e = split_bytes(a, split);
    if (e == cudaSuccess) bytes = art_layout(a, split).bytes;
    return e;
  }

  static cudaError_t launch(const ArtDecodeArgs& a, cudaStream_t stream) {
    const PagedDecodeArgs& at = a.attn;
    if (at.batch == 0) return cudaSuccess;
    detail::Plan plan;
    cudaError_t e = ArtVariant::plan(a, plan);
    if (e != cudaSuccess) return e;
    size_t need = 0;
    if ((e = workspace_size(a, need)) != cudaSuccess) return e;
    if (a.art.lag_rounds < lag(plan, a) - kLagSlack || at.workspace == nullptr || at.workspace_bytes < need)
      return cudaErrorInvalidValue;
    size_t split = 0;
    if ((e = split_bytes(a, split)) != cudaSuccess) return e;
    const ArtLayout l = art_layout(a, split);
    char* ws = static_cast<char*>(at.workspace);
    float *part_o = nullptr, *part_lse = nullptr;
    if (!plan.direct) {
      const detail::WorkspaceLayout wl = detail::workspace_layout(at, plan.num_chunks);
      part_o = reinterpret_cast<float*>(ws + wl.o_offset);
      part_lse = reinterpret_cast<float*>(ws + wl.lse_offset);
    }
    ArtKernelParams p{};
    p.sp = SplitParams{.q = at.q, .k = at.k_pool, .v = at.v_pool, .page_table = at.page_table,
                       .seq_lens = at.seq_lens, .head_masks = at.head_masks, .tables_per_seq = at.num_kv_heads,
                       .out_o = plan.direct ? at.o : part_o, .out_lse = plan.direct ? at.lse : part_lse,
                       .o_head_stride = plan.direct ? D : plan.num_chunks * D,
                       .lse_head_stride = plan.direct ? 1 : plan.num_chunks,
                       .out_o_bf16 = plan.direct ? at.o_bf16 : nullptr, .counters = nullptr, .dynamic = false,
                       .num_heads = at.num_heads, .num_kv_heads = at.num_kv_heads, .group = at.group_size(),
                       .sub_groups = 1, .max_pages_per_seq = at.max_pages_per_seq,
                       .page_stride = at.page_stride_elems(), .head_stride = at.head_stride_elems(),
                       .scale_log2 = at.scale * 1.4426950408889634f};
    p.round_blocks = a.art.round_pages / kArtBlockPages;
    p.lag = a.art.lag_rounds;
    p.patience = a.art.patience;
    p.eps_scale = a.art.eps_scale;
    p.eps_dir = a.art.eps_dir;
    p.max_rounds = l.max_rounds;
    p.max_blocks = l.max_blocks;
    p.ints = reinterpret_cast<int*>(ws + l.ints);
    p.ints_per_list = l.ints_per_list;
    p.blocks = reinterpret_cast<float*>(ws + l.blocks);
    p.stats = a.stats;
    p.heads_listed = a.heads_listed;
    p.row_policy = a.rules ? a.row_policy : nullptr;
    p.rules = a.row_policy ? a.rules : nullptr;

    const dim3 grid(plan.num_chunks, at.num_kv_heads, at.batch);
    if (at.head_masks)
      art_split_kernel<D, true><<<grid, kThreadsPerCta, C::kSmemBytes, stream>>>(p);
    else
      art_split_kernel<D, false><<<grid, kThreadsPerCta, C::kSmemBytes, stream>>>(p);
    if ((e = cudaGetLastError()) != cudaSuccess || plan.direct) return e;
    detail::DeviceInfo info;
    if ((e = detail::device_info(info)) != cudaSuccess) return e;
    const detail::MergeParams mp{.part_o = part_o, .part_lse = part_lse, .num_heads = at.num_heads,
                                 .num_chunks = plan.num_chunks};
    return detail::launch_merge<D>(mp, detail::WriteMergedState<D>{at.o, at.lse, at.o_bf16},
                                   at.batch * at.num_heads, info.cc_major, stream);
  }
};

}  // namespace

size_t art_decode_workspace_size(const ArtDecodeArgs& args) {
  if (!art_supported(args)) return 0;
  size_t bytes = 0;
  const cudaError_t e = args.attn.head_dim == 64 ? ArtVariant<64>::workspace_size(args, bytes)
                                                 : ArtVariant<128>::workspace_size(args, bytes);
  return e == cudaSuccess ? bytes : 0;
}

int art_decode_lag(const ArtDecodeArgs& args) {
  if (!art_supported(args)) return -1;
  detail::Plan plan;
  if (args.attn.head_dim == 64) {
    if (ArtVariant<64>::plan(args, plan) != cudaSuccess) return -1;
    return ArtVariant<64>::lag(plan, args);
  }
  if (ArtVariant<128>::plan(args, plan) != cudaSuccess) return -1;
  return ArtVariant<128>::lag(plan, args);
}

cudaError_t art_decode_attention(const ArtDecodeArgs& args, cudaStream_t stream) {
  if (!art_supported(args)) return cudaErrorInvalidValue;
  return args.attn.head_dim == 64 ? ArtVariant<64>::launch(args, stream) : ArtVariant<128>::launch(args, stream);
}

}  // namespace skim::cuda
