// ART decode attention kernel (see art_decode_attention.cuh). It reuses the paged decode
// kernel's page pipeline and arithmetic (paged_decode_attention_impl.cuh: copy, QK^T, online
// softmax, PV, the CTA merge and the chunk merge kernel); what it adds is the traversal:
//
//  * Blocks. A list's pages are cut into blocks of kArtBlockPages; block j goes to warp
//    j mod T of the T = chunks x WARPS warps of the list (a warp walks its blocks in order,
//    two pages in flight). Each warp keeps two states: the block's own (reset per block) and
//    its running sum, merged at each block's end (merging, never subtracting).
//  * Rounds. Round r is blocks [r B, r B + B), B = round_pages / 4. At a block's end the warp
//    writes the block's probe state (per query head: max, denominator and the 32 probe
//    elements, unnormalised) and counts in for its round; the warp that completes the round
//    waits for round r-1's test to be done (tests run in order), merges the round's probe
//    states into the list's running probe, tests each head and sets the stop round when
//    every head has been stable `patience` times in a row.
//  * The gate. Before its first page of a block in round r > lag, a warp needs the verdict on
//    round r - lag - 1: it waits until that round is tested (or an earlier one stopped) and
//    stops if some round <= r - lag - 1 did. The lag is at least the distance between a
//    warp's consecutive blocks in rounds, so a warp never waits on a round it still has pages
//    of in flight; every CTA of a launch is resident at once (the plan fills one wave), so
//    every wait ends.
//  * The last warp of a list to finish resets the list's counters and adds to the stats.
#include "backend/cuda/art_decode_attention.cuh"

#include "backend/cuda/paged_decode_attention_impl.cuh"

namespace skim::cuda {

namespace {

using detail::kPageSize;
using detail::SplitConfig;
using detail::SplitParams;

constexpr int kWarps = 8, kStages = 2;
constexpr int kPartFloats = kArtProbe + 2;        // a block's probe state per head: probe, m, l
constexpr int kRunFloats = 2 * kArtProbe + 4;     // a list's running state per head (see RunState)
constexpr int kCtrlInts = 4;                      // per list: rounds tested, stop round + 1, warps done

// A list's running probe state per head, in the workspace:
//   [0] m, [1] l, [2, 34) probe (unnormalised), [34, 66) previous round's normalised probe,
//   [66] its norm, [67] consecutive stable rounds.
struct RunState {
  static constexpr int kM = 0, kL = 1, kProbe = 2, kPrev = 2 + kArtProbe, kPrevNorm = 2 + 2 * kArtProbe,
                       kStable = kPrevNorm + 1;
};

struct ArtKernelParams {
  SplitParams sp;  // tables_per_seq = num_kv_heads, sub_groups = 1
  int round_blocks, lag, patience;
  float eps_scale, eps_dir;
  int max_rounds, max_blocks;
  int* ctrl;         // [lists][kCtrlInts]
  int* arrive;       // [lists][max_rounds]: blocks of the round done
  float* running;    // [lists][kArtMaxGroup][kRunFloats]
  float* parts;      // [lists][max_blocks][kArtMaxGroup][kPartFloats]
  ArtDecodeStats* stats;
};

__device__ __forceinline__ int ld_volatile(const int* p) { return *reinterpret_cast<const volatile int*>(p); }
__device__ __forceinline__ void st_volatile(int* p, int v) { *reinterpret_cast<volatile int*>(p) = v; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Where one list's traversal state lives, and the rules of its rounds.
struct ListState {
  const ArtKernelParams* p;
  size_t list;
  int n_pages, n_blocks, n_rounds;
  __device__ int* ctrl() const { return p->ctrl + list * kCtrlInts; }
  __device__ int* arrive() const { return p->arrive + list * p->max_rounds; }
  __device__ float* running(int g) const { return p->running + (list * kArtMaxGroup + g) * kRunFloats; }
  __device__ float* part(int block, int g) const {
    return p->parts + ((list * p->max_blocks + block) * kArtMaxGroup + g) * kPartFloats;
  }
  __device__ int blocks_in_round(int r) const { return min(p->round_blocks, n_blocks - r * p->round_blocks); }

  // Lane 0 waits until the verdict on round r - lag - 1 is known; the warp learns whether it
  // may read blocks of round r.
  __device__ bool may_read(int r, int lane) const {
    const int decided = r - p->lag - 1;  // the newest round whose verdict applies to round r
    bool go = true;
    if (decided >= 0 && lane == 0) {
      for (;;) {
        const int stop = ld_volatile(ctrl() + 1);
        if (stop > 0 && stop - 1 <= decided) {
          go = false;
          break;
        }
        if (ld_volatile(ctrl()) > decided) break;
        __nanosleep(100);
      }
      __threadfence();
    }
    return __shfl_sync(0xffffffffu, go, 0);
  }

  // Round r's test, by the warp that completed the round (rounds are tested in order).
  __device__ void test_round(int r, int rows, int lane) const {
    if (lane == 0)
      while (ld_volatile(ctrl()) != r) __nanosleep(64);
    __syncwarp();
    __threadfence();
    if (ld_volatile(ctrl() + 1) == 0) {
      bool all = true;
      for (int g = 0; g < rows; ++g) {
        float* rs = running(g);
        float m = r > 0 ? __ldcg(rs + RunState::kM) : -INFINITY, l = r > 0 ? __ldcg(rs + RunState::kL) : 0.0f;
        float x = r > 0 ? __ldcg(rs + RunState::kProbe + lane) : 0.0f;
        const int b0 = r * p->round_blocks, b1 = b0 + blocks_in_round(r);
        for (int blk = b0; blk < b1; ++blk) {
          const float* ps = part(blk, g);
          const float mb = __ldcg(ps + kArtProbe), lb = __ldcg(ps + kArtProbe + 1), xb = __ldcg(ps + lane);
          const float mn = fmaxf(m, mb);
          if (mn == -INFINITY) continue;  // neither has seen a key of this head
          const float wa = exp2f(m - mn), wb = exp2f(mb - mn);
          x = x * wa + xb * wb;
          l = l * wa + lb * wb;
          m = mn;
        }
        const float c = l > 0.0f ? x / l : 0.0f;
        const float prev = r > 0 ? __ldcg(rs + RunState::kPrev + lane) : 0.0f;
        const float prev_norm = r > 0 ? __ldcg(rs + RunState::kPrevNorm) : 0.0f;
        const int run = r > 0 ? __float_as_int(__ldcg(rs + RunState::kStable)) : 0;
        const float norm = sqrtf(warp_sum(c * c)), dot = warp_sum(prev * c);
        const bool stable = prev_norm > 0.0f && norm > 0.0f &&
                            fabsf(norm - prev_norm) / prev_norm < p->eps_scale &&
                            1.0f - dot / (norm * prev_norm) < p->eps_dir;
        const int run_new = stable ? run + 1 : 0;
        __syncwarp();  // every lane has read the old state
        rs[RunState::kProbe + lane] = x;
        rs[RunState::kPrev + lane] = c;
        if (lane == 0) {
          rs[RunState::kM] = m;
          rs[RunState::kL] = l;
          rs[RunState::kPrevNorm] = norm;
          rs[RunState::kStable] = __int_as_float(run_new);
        }
        all = all && run_new >= p->patience;
      }
      if (all && lane == 0) st_volatile(ctrl() + 1, r + 1);
    }
    __syncwarp();
    __threadfence();
    if (lane == 0) st_volatile(ctrl(), r + 1);
  }

  // The last warp of the list: stats, then every counter back to zero for the next call.
  __device__ void finish(int lane) const {
    const int stop = ld_volatile(ctrl() + 1);
    const int read_rounds = stop > 0 ? min(n_rounds, stop + p->lag) : n_rounds;
    const int read = min(n_pages, read_rounds * p->round_blocks * kArtBlockPages);
    for (int r = lane; r < n_rounds; r += 32) arrive()[r] = 0;
    if (lane == 0) {
      if (p->stats) {
        atomicAdd(&p->stats->lists, 1ull);
        atomicAdd(&p->stats->stopped, read < n_pages ? 1ull : 0ull);
        atomicAdd(&p->stats->pages_listed, (unsigned long long)n_pages);
        atomicAdd(&p->stats->pages_read, (unsigned long long)read);
      }
      ctrl()[0] = ctrl()[1] = ctrl()[2] = 0;
    }
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
  __device__ int load_id(int j) const {
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

template <int D, bool MASKED>
__global__ void __launch_bounds__(kWarps * 32) art_split_kernel(const ArtKernelParams p) {
  using C = SplitConfig<D, kWarps, kStages>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int stage_valid[kWarps][kStages];
  __shared__ int stage_block[kWarps][kStages];  // the page's block when it ends one, else -1
  __shared__ uint32_t stage_mask[kWarps][kStages];

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
  ListState ls{&p, list, (len + kPageSize - 1) / kPageSize, 0, 0};
  ls.n_blocks = (ls.n_pages + kArtBlockPages - 1) / kArtBlockPages;
  ls.n_rounds = (ls.n_blocks + p.round_blocks - 1) / p.round_blocks;
  const int first_valid = len - (ls.n_pages - 1) * kPageSize;  // the partial page is listed first
  WarpBlocks<MASKED> wb{.table = sp.page_table + list * sp.max_pages_per_seq,
                        .masks = MASKED ? sp.head_masks + list * sp.max_pages_per_seq : nullptr,
                        .n_pages = ls.n_pages, .total_warps = int(gridDim.x) * kWarps,
                        .gw = chunk * kWarps + warp, .lane = lane};
  wb.start();

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
    if (!done && pos == 0 && i > 0) wb.advance();
    const int j = wb.block(wb.k), page = j * kArtBlockPages + pos;
    if (!done && (page >= ls.n_pages || (pos == 0 && !ls.may_read(j / p.round_blocks, lane)))) done = true;
    if (!done) {
      ++n_issued;
      const int s = i % kStages;
      const int id = __shfl_sync(0xffffffffu, wb.cur_ids, pos);
      const uint32_t mask = MASKED ? __shfl_sync(0xffffffffu, wb.cur_masks, pos) : ~0u;
      if (lane == 0) {
        stage_valid[warp][s] = page == 0 ? first_valid : kPageSize;
        stage_block[warp][s] = pos == kArtBlockPages - 1 || page == ls.n_pages - 1 ? j : -1;
        stage_mask[warp][s] = mask;
      }
      detail::copy_page_async<C>(kbase, vbase, size_t(id) * sp.page_stride, page == 0 ? first_valid : kPageSize,
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
    const bool attends = !MASKED || (stage_mask[warp][s] >> row & 1u);
    detail::update_softmax_state<D, MASKED>(sc, stage_valid[warp][s], attends, quad, m_blk, l_blk, acc, pr);
    detail::compute_pv<C, D>(pr, ks + C::kPageBytes, lane, acc);
    const int ended = stage_block[warp][s];
    __syncwarp();
    if (ended >= 0) {
      // The block's probe state out, then merged into the warp's sum and cleared.
      const float l_quad = l_blk + __shfl_xor_sync(0xffffffffu, l_blk, 1);
      const float l_all = l_quad + __shfl_xor_sync(0xffffffffu, l_quad, 2);
      if (row < rows) {
        float* part = ls.part(ended, row);
#pragma unroll
        for (int e = 0; e < 8; ++e) part[quad * 8 + e] = acc[e * (D / 64)][0];
        if (quad == 0) {
          part[kArtProbe] = m_blk;
          part[kArtProbe + 1] = l_all;
        }
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
      __syncwarp();
      __threadfence();  // the probe state is visible before the round counts this block
      const int r = ended / p.round_blocks;
      int last = 0;
      if (lane == 0) last = atomicAdd(ls.arrive() + r, 1) + 1 == ls.blocks_in_round(r);
      if (__shfl_sync(0xffffffffu, last, 0) && r + 1 < ls.n_rounds) ls.test_round(r, rows, lane);
    }
    issue(i + kStages);
  }
  detail::cp_async_wait<0>();

  l_sum += __shfl_xor_sync(0xffffffffu, l_sum, 1);
  l_sum += __shfl_xor_sync(0xffffffffu, l_sum, 2);
  __syncwarp();
  detail::store_warp_state<D>(reinterpret_cast<float*>(wbuf), sum, m_sum, l_sum, row, quad);
  __syncthreads();
  detail::merge_warp_states<C, D, kWarps>(smem, sp, b, hq0, rows, chunk);

  int last = 0;
  if (lane == 0) {
    __threadfence();
    last = atomicAdd(ls.ctrl() + 2, 1) + 1 == wb.total_warps;
  }
  if (__shfl_sync(0xffffffffu, last, 0)) {
    __threadfence();
    ls.finish(lane);
  }
}

// The workspace: the paged decode split's region (chunk partials), then the lists' counters,
// round arrivals, running probe states and block probe states.
struct ArtLayout {
  size_t ctrl, arrive, running, parts, bytes;
  int max_rounds, max_blocks;
};

ArtLayout art_layout(const ArtDecodeArgs& a, size_t split_bytes) {
  const PagedDecodeArgs& at = a.attn;
  const size_t lists = size_t(at.batch) * at.num_kv_heads;
  ArtLayout l;
  l.max_blocks = (at.max_pages_per_seq + kArtBlockPages - 1) / kArtBlockPages;
  const int round_blocks = a.art.round_pages / kArtBlockPages;
  l.max_rounds = round_blocks > 0 ? (l.max_blocks + round_blocks - 1) / round_blocks : 0;
  l.ctrl = detail::align_up(split_bytes, 256);
  l.arrive = l.ctrl + detail::align_up(lists * kCtrlInts * 4, 256);
  l.running = l.arrive + detail::align_up(lists * l.max_rounds * 4, 256);
  l.parts = l.running + detail::align_up(lists * kArtMaxGroup * kRunFloats * 4, 256);
  l.bytes = l.parts + detail::align_up(lists * l.max_blocks * kArtMaxGroup * kPartFloats * 4, 256);
  return l;
}

bool art_supported(const ArtDecodeArgs& a) {
  const PagedDecodeArgs& at = a.attn;
  return detail::supported(at) && at.tables_per_kv_head && at.group_size() <= kArtMaxGroup &&
         a.art.round_pages > 0 && a.art.round_pages % kArtBlockPages == 0 && a.art.patience >= 1 &&
         a.art.lag_rounds >= 0;
}

template <int D>
struct ArtVariant {
  using C = SplitConfig<D, kWarps, kStages>;
  using Split = detail::Variant<D, kWarps, kStages>;  // plans the split like paged decode

  static cudaError_t prepare() {
    static bool done[64] = {};
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess || (dev < 64 && done[dev])) return e;
    for (const void* f : {reinterpret_cast<const void*>(art_split_kernel<D, false>),
                          reinterpret_cast<const void*>(art_split_kernel<D, true>)}) {
      if ((e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes)) != cudaSuccess)
        return e;
      if ((e = cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared)) != cudaSuccess)
        return e;
    }
    // Every CTA of a launch must be resident at once (warps wait on each other's rounds): the
    // split plan fills the machine with one CTA per SM, which this kernel must also fit.
    int per_sm = 0;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, art_split_kernel<D, true>, C::kThreads,
                                                           C::kSmemBytes)) != cudaSuccess)
      return e;
    int split_per_sm = 0;
    if ((e = Split::ctas_per_sm(split_per_sm)) != cudaSuccess) return e;
    if (per_sm < split_per_sm) return cudaErrorInvalidConfiguration;
    if (dev < 64) done[dev] = true;
    return cudaSuccess;
  }

  static cudaError_t plan(const ArtDecodeArgs& a, detail::Plan& plan) {
    cudaError_t e = prepare();
    if (e != cudaSuccess) return e;
    return Split::plan(a.attn, 0, plan);
  }

  static int lag(const detail::Plan& plan, const ArtDecodeArgs& a) {
    const int warps = plan.num_chunks * kWarps, round_blocks = a.art.round_pages / kArtBlockPages;
    return (warps + round_blocks - 1) / round_blocks;
  }

  static cudaError_t workspace_size(const ArtDecodeArgs& a, size_t& bytes) {
    size_t split = 0;
    cudaError_t e = Split::workspace_size(a.attn, split);
    if (e != cudaSuccess) return e;
    split = std::max(split, detail::kCounterBytes);
    bytes = art_layout(a, split).bytes;
    return cudaSuccess;
  }

  static cudaError_t launch(const ArtDecodeArgs& a, cudaStream_t stream) {
    const PagedDecodeArgs& at = a.attn;
    if (at.batch == 0) return cudaSuccess;
    detail::Plan plan;
    cudaError_t e = ArtVariant::plan(a, plan);
    if (e != cudaSuccess) return e;
    size_t need = 0;
    if ((e = workspace_size(a, need)) != cudaSuccess) return e;
    if (a.art.lag_rounds < lag(plan, a) || at.workspace == nullptr || at.workspace_bytes < need)
      return cudaErrorInvalidValue;
    size_t split_bytes = 0;
    if ((e = Split::workspace_size(at, split_bytes)) != cudaSuccess) return e;
    const ArtLayout l = art_layout(a, std::max(split_bytes, detail::kCounterBytes));
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
                       .lse_head_stride = plan.direct ? 1 : plan.num_chunks, .counters = nullptr, .dynamic = false,
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
    p.ctrl = reinterpret_cast<int*>(ws + l.ctrl);
    p.arrive = reinterpret_cast<int*>(ws + l.arrive);
    p.running = reinterpret_cast<float*>(ws + l.running);
    p.parts = reinterpret_cast<float*>(ws + l.parts);
    p.stats = a.stats;

    const dim3 grid(plan.num_chunks, at.num_kv_heads, at.batch);
    if (at.head_masks)
      art_split_kernel<D, true><<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
    else
      art_split_kernel<D, false><<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
    if ((e = cudaGetLastError()) != cudaSuccess || plan.direct) return e;
    detail::DeviceInfo info;
    if ((e = detail::device_info(info)) != cudaSuccess) return e;
    const detail::MergeParams mp{.part_o = part_o, .part_lse = part_lse, .o = at.o, .lse = at.lse,
                                 .num_heads = at.num_heads, .num_chunks = plan.num_chunks};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(at.batch * at.num_heads);
    cfg.blockDim = dim3(detail::kMergeThreads);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = info.cc_major >= 9 ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, detail::merge_kernel<D>, mp);
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
