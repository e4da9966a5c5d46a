// Quest's page selection kernels (see quest_page_select.cuh).
#include "backend/cuda/quest_page_select.cuh"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/device_info.h"
#include "backend/cuda/page_select_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/segment_sort.cuh"
#include "backend/cuda/segment_sort_block.cuh"
#include "backend/cuda/workspace_carver.h"

namespace skim::cuda {

namespace {

using namespace page_select;

// Workspace: keys [batch][num_heads][max_pages_per_seq], then flags of the same shape; with
// by_score then each listed page's sort key ([lists][max_pages_per_seq]), the lists' segments
// and the sort's scratch (segment_sort.cuh).
struct ByScore {
  uint32_t* keys = nullptr;
  int *begin = nullptr, *end = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

// The longest list the union can make: the group's kept pages at the longest context.
int sort_items(const QuestPageSelectArgs& a) {
  const long kept = quest_pages_kept(a.budget, a.min_tokens, a.max_pages_per_seq * a.page_size, a.page_size);
  return int(std::min<long>(a.max_pages_per_seq, kept * a.group_size()));
}

// The by_score part of the workspace, from `base` (its offset) on; `bytes` its size.
ByScore by_score_layout(const QuestPageSelectArgs& a, char* base, size_t* bytes) {
  const size_t lists = size_t(a.batch) * a.num_kv_heads, slots = lists * a.max_pages_per_seq;
  WorkspaceCarver carve(base);
  ByScore x;
  x.keys = carve.take<uint32_t>(slots);
  x.begin = carve.take<int>(lists);
  x.end = carve.take<int>(lists);
  x.scratch_bytes = segment_sort_scratch_bytes(int(slots), int(lists), sort_items(a));
  x.scratch = carve.take<char>(x.scratch_bytes);
  if (bytes) *bytes = carve.bytes();
  return x;
}

// A head's flags row is padded to whole kItems-page runs, so that the union reads a thread's
// run of one head's flags with one 16-byte load.
__host__ __device__ __forceinline__ size_t flag_stride(const QuestPageSelectArgs& a) {
  return (size_t(a.max_pages_per_seq) + kItems - 1) / kItems * kItems;
}

size_t base_bytes(const QuestPageSelectArgs& a) {
  const size_t heads = size_t(a.batch) * a.num_heads;
  return WorkspaceCarver::align(heads * a.max_pages_per_seq * sizeof(uint32_t)) +
         WorkspaceCarver::align(heads * flag_stride(a));
}

__device__ __forceinline__ size_t head_row(const QuestPageSelectArgs& a, int b, int hq) {
  return (size_t(b) * a.num_heads + hq) * a.max_pages_per_seq;
}
__device__ __forceinline__ uint32_t* keys_of(const QuestPageSelectArgs& a, int b, int hq) {
  return static_cast<uint32_t*>(a.workspace) + head_row(a, b, hq);
}
__device__ __forceinline__ uint8_t* flags_of(const QuestPageSelectArgs& a, int b, int hq) {
  const size_t keys = size_t(a.batch) * a.num_heads * a.max_pages_per_seq;
  return static_cast<uint8_t*>(a.workspace) + WorkspaceCarver::align(keys * sizeof(uint32_t)) +
         (size_t(b) * a.num_heads + hq) * flag_stride(a);
}

__device__ __forceinline__ int context_of(const QuestPageSelectArgs& a, int b) {
  return min(max(a.seq_lens[b], 0), a.max_pages_per_seq * a.page_size);
}

// Query heads of a group whose queries a score warp loads before the digests (the 8B shape's,
// the demo model's and SmolLM2's groups: 4, 4 and 3); a larger group's others load as scored.
constexpr int kPreloadHeads = 4;

// One warp's pages p0 .. p0 + kWarpPages - 1 (those < m) of sequence b: their digests loaded
// once and scored for each query head g of KV head kvh's group, store(g, p, key) with the
// bound's order-preserving key (the newest page highest). The page ids load first, then the
// group's queries, so that both are in flight together and the digests (which wait on the ids)
// are followed by no other load: the queries loaded one by one after the digests kept a warp
// alive for a round trip per head, and the kernel at about 72% of the bandwidth (H100,
// 2026-11-26/27).
template <int D, class Store>
__device__ __forceinline__ void score_warp_pages(const QuestPageSelectArgs& a, int b, int kvh, int p0, int m, int lane,
                                                 Store store) {
  constexpr int V = D / 32;
  const int group = a.group_size();
  const uint16_t* q = a.q + (size_t(b) * a.num_heads + size_t(kvh) * group) * D;
  const int my_id = WarpDigests<D>::lane_page_id(a.page_table + size_t(b) * a.max_pages_per_seq, p0, m, lane);
  float pre[kPreloadHeads][V];
#pragma unroll
  for (int g = 0; g < kPreloadHeads; ++g)
    if (g < group) load_query<D>(q + size_t(g) * D, 1, lane, pre[g]);
  WarpDigests<D> dig;
  dig.load(a.kmin, a.kmax, a.num_kv_heads, kvh, my_id, p0, m, lane);
  const auto score = [&](int g, const float (&qv)[V]) {
    const float s = dig.bounds(qv, lane);
    const int p = p0 + lane;
    if (lane < kWarpPages && p < m) store(g, p, p == m - 1 ? kNewestKey : order_key(s));
  };
#pragma unroll
  for (int g = 0; g < kPreloadHeads; ++g)
    if (g < group) score(g, pre[g]);
  for (int g = kPreloadHeads; g < group; ++g) {
    float qv[V];
    load_query<D>(q + size_t(g) * D, 1, lane, qv);
    score(g, qv);
  }
}

// Grid (page blocks, KV heads, batch): a warp per kWarpPages pages (score_warp_pages).
template <int D>
__global__ void __launch_bounds__(kScoreWarps * 32, kScoreMinCtas) score_kernel(const QuestPageSelectArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = blockIdx.y, b = blockIdx.z, group = a.group_size();
  const int m = pages_of(context_of(a, b), a.page_size);
  const int p0 = blockIdx.x * kPagesPerScoreCta + warp * kWarpPages;
  if (p0 >= m || !a.rows.has(b)) return;
  score_warp_pages<D>(a, b, kvh, p0, m, lane,
                      [&](int g, int p, uint32_t key) { keys_of(a, b, kvh * group + g)[p] = key; });
}

// One CTA per (query head, sequence): its n best pages flagged 1, the others 0, a thread's run
// of kItems flags (the row is padded to whole runs) as one 16-byte store. MIN_CTAS 2 (64
// registers) where the grid has more CTAs than the GPU has SMs, so that it runs in one wave:
// 17.0 -> 12.9 us at b8 32K and 19.7 -> 15.7 at b8 128K; at b1 (32 CTAs) no faster (H100,
// bench/select_bw.cu, bench/results/2026-11-27-s28-select-walk/).
template <int MIN_CTAS>
__global__ void __launch_bounds__(kThreads, MIN_CTAS) select_kernel(const QuestPageSelectArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  __shared__ SelectSmem sm;
  const int hq = blockIdx.x, b = blockIdx.y;
  if (!a.rows.has(b)) return;
  const int ctx = context_of(a, b), m = pages_of(ctx, a.page_size);
  const int n = min(m, quest_pages_kept(a.budget, a.min_tokens, ctx, a.page_size));
  uint8_t* flags = flags_of(a, b, hq);
  if (n == m) {  // every page kept (short sequences)
    for (int p = threadIdx.x; p < m; p += kThreads) flags[p] = 1;
    return;
  }
  static_assert(kItems == 16, "a run's flags are one 16-byte store");
  select_top_page_runs<false>(sm, keys_of(a, b, hq), m, n, [&](int p0, unsigned keep_bits, int) {
    uint32_t w[4] = {};
#pragma unroll
    for (int i = 0; i < kItems; ++i) w[i / 4] |= (keep_bits >> i & 1u) << (8 * (i % 4));
    *reinterpret_cast<uint4*>(flags + p0) = make_uint4(w[0], w[1], w[2], w[3]);
  });
}

// The union of one (sequence, KV head): per page the mask of the group's heads that keep it (the
// heads' flag rows from flags_of(g), 16-byte aligned, padded to kItems pages); the pages some
// head keeps listed in position order with their masks. by_score: with each page's sort key
// too (the largest of its heads' keys: the newest page's is the highest), for the sort. Every
// thread of the CTA calls it; it returns the count of pages listed.
//
// A tile gives each warp `rounds` x 128 consecutive pages, walked in rounds of 4 pages a lane (a
// 4-byte load of each head's flags), so that a round's listed pages go to consecutive slots
// across the lanes (a warp scan) and the stores coalesce; the warps' counts are summed through
// shared memory. rounds (1 to 4) is as few as cover the list in one tile, so that short lists
// still spread over every warp. (Before: a thread's own 16 consecutive pages and one block scan,
// each of its 16 stores per output array about 20 bytes from its neighbour lane's; the union
// took 12.7 us at b8 128K, now 10.0, bench/results/2026-11-27-s28-select-walk/.)
template <class FlagsOf>
__device__ int write_union(const QuestPageSelectArgs& a, const ByScore& bs, int b, int kvh, int ctx, int m,
                            FlagsOf flags_of_head) {
  constexpr int kWarps = kThreads / 32, kLanePages = 4, kRounds = kItems / kLanePages;
  constexpr int kRoundPages = kThreads * kLanePages;  // pages of one round over the whole CTA
  __shared__ int warp_listed[kWarps];
  const int rounds = min(kRounds, max(1, (m + kRoundPages - 1) / kRoundPages));
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, group = a.group_size();
  const size_t list = (size_t(b) * a.num_kv_heads + kvh) * a.max_pages_per_seq;
  const size_t list_index = size_t(b) * a.num_kv_heads + kvh;
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  int written = 0;
  for (int base = 0; base < m; base += kRoundPages * rounds) {
    uint32_t mask[kRounds][kLanePages], key[kRounds][kLanePages];
    int32_t ids[kRounds][kLanePages];
    int pos[kRounds], warp_total = 0;
    // Every round's page ids and (up to kPreloadHeads) heads' flags load before any is used: one
    // round trip for the lot.
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      // Past `rounds` p0 is past m: nothing loaded, nothing listed.
      const int p0 = r < rounds ? base + ((warp * rounds + r) * 32 + lane) * kLanePages : m;
#pragma unroll
      for (int j = 0; j < kLanePages; ++j) {
        mask[r][j] = key[r][j] = 0u;
        ids[r][j] = p0 + j < m ? table[p0 + j] : 0;
      }
      const auto add_head = [&](int g, uint32_t run) {
#pragma unroll
        for (int j = 0; j < kLanePages; ++j)
          if (p0 + j < m && (run >> (8 * j) & 0xffu)) {
            mask[r][j] |= 1u << g;
            if (a.by_score) key[r][j] = max(key[r][j], keys_of(a, b, kvh * group + g)[p0 + j]);
          }
      };
      if (p0 < m) {
        static_assert(kLanePages == 4, "a lane's 4 pages of one head's flags are one 4-byte load");
        uint32_t runs[kPreloadHeads];
#pragma unroll
        for (int g = 0; g < kPreloadHeads; ++g)
          if (g < group) runs[g] = *reinterpret_cast<const uint32_t*>(flags_of_head(g) + p0);
#pragma unroll
        for (int g = 0; g < kPreloadHeads; ++g)
          if (g < group) add_head(g, runs[g]);
        for (int g = kPreloadHeads; g < group; ++g) add_head(g, *reinterpret_cast<const uint32_t*>(flags_of_head(g) + p0));
      }
      int listed = 0;
#pragma unroll
      for (int j = 0; j < kLanePages; ++j) listed += mask[r][j] != 0u;
      int incl = listed;  // the warp's inclusive scan of the round's counts
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += x;
      }
      pos[r] = warp_total + incl - listed;
      warp_total += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) warp_listed[warp] = warp_total;
    __syncthreads();
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int c = warp_listed[w];
      before += w < warp ? c : 0;
      total += c;
    }
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      int at = written + before + pos[r];
#pragma unroll
      for (int j = 0; j < kLanePages; ++j)
        if (mask[r][j]) {
          const size_t slot = list + at++;
          a.out_table[slot] = ids[r][j];
          a.out_masks[slot] = mask[r][j];
          if (a.by_score) bs.keys[slot] = key[r][j];
        }
    }
    written += total;
    __syncthreads();  // warp_listed is rewritten by the next tile
  }
  if (t == 0) {
    const int tokens = m == 0 ? 0 : (written - 1) * a.page_size + ctx - (m - 1) * a.page_size;
    a.out_lens[list_index] = tokens;
    if (a.by_score) bs.end[list_index] = int(list) + written;
    if (a.listed_tokens) atomicAdd(a.listed_tokens, (unsigned long long)tokens);
  }
  return written;
}

// One CTA per (KV head, sequence): the union of its group's flags (write_union). SORT (by_score,
// lists of at most kCtaSortItems): the CTA then sorts its list by descending key itself, where a
// sort kernel of its own (11.3 us under ncu) reloaded the list after a launch: quest+art's
// attention step with agreeing heads at b8 32K 87.1 -> 85.9 us (H200, 2026-11-28).
template <bool SORT>
__global__ void __launch_bounds__(kThreads) union_kernel(const QuestPageSelectArgs a, const ByScore bs) {
  static_assert(!SORT || kThreads == segment_sort::kSortThreads, "the sort runs on the union CTA");
  detail::pdl_enter();  // launched by launch_pdl
  const int kvh = blockIdx.x, b = blockIdx.y, group = a.group_size();
  const size_t list = (size_t(b) * a.num_kv_heads + kvh) * a.max_pages_per_seq;
  const size_t list_index = size_t(b) * a.num_kv_heads + kvh;
  if (a.by_score && threadIdx.x == 0) bs.begin[list_index] = bs.end[list_index] = int(list);  // unplanned rows: nothing to sort
  if (!a.rows.has(b)) return;
  const int ctx = context_of(a, b), m = pages_of(ctx, a.page_size);
  const int listed = write_union(a, bs, b, kvh, ctx, m, [&](int g) { return flags_of(a, b, kvh * group + g); });
  if constexpr (SORT) {
    __shared__ segment_sort::BitonicStorage sort;
    segment_sort::sort_list_in_cta({.keys = bs.keys, .values = a.out_table, .values2 = a.out_masks}, int(list),
                                   listed, sort);
  }
}

bool supported(const QuestPageSelectArgs& a) {
  return a.batch >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
         a.group_size() <= 32 && (a.head_dim == 64 || a.head_dim == 128) && a.page_size > 0 &&
         a.max_pages_per_seq > 0 && a.budget > 0 && a.min_tokens >= 0;
}

}  // namespace

size_t quest_page_select_workspace_size(const QuestPageSelectArgs& a) {
  if (!supported(a)) return 0;
  size_t sort = 0;
  if (a.by_score) by_score_layout(a, nullptr, &sort);
  return base_bytes(a) + sort;
}

cudaError_t quest_page_select(const QuestPageSelectArgs& a, cudaStream_t stream) {
  if (!supported(a) || a.workspace == nullptr || a.workspace_bytes < quest_page_select_workspace_size(a))
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  cudaError_t e = launch_scores(score_kernel<64>, score_kernel<128>, a, a.num_kv_heads, stream);
  if (e != cudaSuccess) return e;
  detail::DeviceInfo gpu;
  if ((e = detail::device_info(gpu)) != cudaSuccess) return e;
  const bool one_wave = a.num_heads * a.batch > gpu.sms;
  (void)launch_pdl(one_wave ? select_kernel<2> : select_kernel<1>, dim3(a.num_heads, a.batch), kThreads, 0, stream, a);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  ByScore bs;
  if (a.by_score) bs = by_score_layout(a, static_cast<char*>(a.workspace) + base_bytes(a), nullptr);
  // by_score: descending key, the pages and masks in place; the sort is stable, so ties stay in
  // position order, as on the CPU. Lists that fit the union CTA's sort are sorted there; longer
  // ones by a sort of their own.
  const bool sort_in_union = a.by_score && sort_items(a) <= kCtaSortItems;
  (void)launch_pdl(sort_in_union ? union_kernel<true> : union_kernel<false>, dim3(a.num_kv_heads, a.batch), kThreads,
                   0, stream, a, bs);
  if ((e = cudaGetLastError()) != cudaSuccess || !a.by_score || sort_in_union) return e;
  const int lists = a.batch * a.num_kv_heads;
  return segment_sort_desc({.lists = lists, .total = lists * a.max_pages_per_seq, .max_items = sort_items(a),
                            .keys = bs.keys, .values = a.out_table, .values2 = a.out_masks, .begin = bs.begin,
                            .end = bs.end, .scratch = bs.scratch, .scratch_bytes = bs.scratch_bytes},
                           stream);
}

}  // namespace skim::cuda
