// MAC's decode-stage kernels (see mac_decode.cuh).
#include "backend/cuda/mac_decode.cuh"

#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>

#include "backend/cuda/mac_merge_state.cuh"
#include "backend/cuda/page_index_map.cuh"
#include "backend/cuda/pdl.cuh"

#include <cfloat>
#include <cstdint>
#include <type_traits>

namespace skim::cuda {

namespace {

__device__ __forceinline__ float bf16_load(const uint16_t* p) { return __bfloat162float(__ushort_as_bfloat16(*p)); }

using detail::mac_rule_of;

// ---- match ----

constexpr int kMatchThreads = 256;
constexpr int kMatchWarps = kMatchThreads / 32;
// Entries a warp has in flight. 16 (two load rounds for a 256-entry ring instead of eight, 80
// registers) was slower: 5.2 against 3.9 us a layer at b1 32K, 8B shape (H200 ncu, 2026-11-29).
constexpr int kMatchBatch = 4;

// A warp per ring entry (kMatchBatch at a time): lane l holds dims [l V, l V + V) of the query
// and of the entry (one 4- or 8-byte load per lane: the warp reads the entry's row coalesced),
// sums its squared differences with fma in order, then the lanes' partials are summed by the xor
// butterfly 16, 8, 4, 2, 1 (MacMatchArgs: the CPU reference adds in the same order). Each warp
// keeps its nearest entry (ties: the newer); the block then takes the nearest of the warps'.
template <int D>
__global__ void __launch_bounds__(kMatchThreads) match_kernel(const MacMatchArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  constexpr int V = D / 32;
  using Raw = std::conditional_t<V == 4, uint2, unsigned>;
  __shared__ float best_d[kMatchWarps];
  __shared__ int best_i[kMatchWarps];
  const int h = blockIdx.x, b = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, H = a.num_heads;
  const size_t out = size_t(b) * H + h;
  const int slot = a.row_slot[b];
  const MacRowRule& rule = *mac_rule_of(a.rules, a.row_policy, b);
  const MacRingsView& r = a.rings;
  if (slot >= 0 && h == 0 && threadIdx.x < 2)  // the step's view of the ring: no block reads it here
    mac_fill_step(r.fill, slot)[threadIdx.x] = mac_fill_latest(r.fill, slot)[threadIdx.x];
  if (slot < 0 || !rule.active || a.positions[b] + 1 < rule.min_context) {
    if (threadIdx.x == 0) a.band_begin[out] = a.hit_entry[out] = -1;
    return;
  }
  float q[V];
#pragma unroll
  for (int v = 0; v < V; ++v) q[v] = bf16_load(a.q_pre + out * D + lane * V + v);
  const int32_t* fill = mac_fill_latest(r.fill, slot);
  const int first = fill[0], count = fill[1], K = rule.window;
  float dist = INFINITY;
  int age = -1;
  for (int i0 = warp * kMatchBatch; i0 < count; i0 += kMatchWarps * kMatchBatch) {
    Raw x[kMatchBatch];
#pragma unroll
    for (int j = 0; j < kMatchBatch; ++j) {  // every load first
      const int e = (first + min(i0 + j, count - 1)) % K;
      x[j] = __ldg(reinterpret_cast<const Raw*>(r.q_pre + ((size_t(slot) * r.capacity + e) * H + h) * D + lane * V));
    }
#pragma unroll
    for (int j = 0; j < kMatchBatch; ++j) {
      const uint16_t* xs = reinterpret_cast<const uint16_t*>(&x[j]);
      float s = 0.0f;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float diff = q[v] - bf16_load(xs + v);
        s = fmaf(diff, diff, s);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (i0 + j < count && (age < 0 || s <= dist)) dist = s, age = i0 + j;  // ascending ages: ties to the newer
    }
  }
  if (lane == 0) best_d[warp] = dist, best_i[warp] = age;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float bd = best_d[0];
  int bi = best_i[0];
  for (int w = 1; w < kMatchWarps; ++w)
    if (best_i[w] >= 0 && (bi < 0 || best_d[w] < bd || (best_d[w] == bd && best_i[w] > bi))) bd = best_d[w], bi = best_i[w];
  const bool hit = bi >= 0 && (a.forced_hits >= 0 ? mac_forced_hit(b, h, a.positions[b]) < a.forced_hits
                                                  : sqrtf(bd) < sqrtf(2.0f * float(D)) * (1.0f - rule.tau));
  const int e = bi < 0 ? -1 : (first + bi) % K;
  a.hit_entry[out] = hit ? e : -1;
  a.band_begin[out] = hit ? mac_prefix_end(r.pos[size_t(slot) * r.capacity + e], rule.band, a.page_size) : -1;
  if (a.bytes)
    atomicAdd(a.bytes, (unsigned long long)(count) * D * sizeof(uint16_t) + (hit ? (D + 1) * sizeof(float) : 0));
}

// ---- page plan ----

constexpr int kPlanThreads = 256;
constexpr int kPlanItems = 8;  // consecutive pages per thread in the walk

__host__ __device__ size_t align256(size_t x) { return (x + 255) / 256 * 256; }
__host__ __device__ size_t inverse_bytes(const MacPagePlanArgs& a) { return align256(size_t(a.num_pool_pages) * sizeof(int32_t)); }
size_t mask_bytes(const MacPagePlanArgs& a) {
  return size_t(a.batch) * a.num_kv_heads * a.max_pages_per_seq * sizeof(uint32_t);
}

__device__ __forceinline__ int pages_of(int len, int ps) { return (len + ps - 1) / ps; }

// A row of another policy: its base list whole as `above`, entries first, first + step, ...
// (a CTA's threads, or one thread's page); `lead` writes the lengths.
__device__ void pass_through(const MacPagePlanArgs& a, int b, int kvh, size_t list, int first, int step, bool lead) {
  const size_t base = a.base_list(b, kvh);
  const int n = pages_of(a.base_lens[base], a.page_size);
  for (int j = first; j < n; j += step) {
    a.above_table[list * a.max_pages_per_seq + j] = a.base_table[base * a.max_pages_per_seq + j];
    a.above_masks[list * a.max_pages_per_seq + j] = a.base_masks ? a.base_masks[base * a.max_pages_per_seq + j] : ~0u;
  }
  if (lead) {  // its policy counts what it reads (listed_tokens counts MAC rows only)
    a.above_lens[list] = a.base_lens[base];
    a.below_lens[list] = 0;
    if (a.below_listed) a.below_listed[list] = 0u;
  }
}

// mac+art's `below` in ART's order (mac_decode_args.h), after plan_kernel's walk listed `above`:
// the pages [lo, split) that some hit head attends (lo: the earliest hit's band start), newest
// first, a slot each by its position; then the base list's pages below lo (no hit head attends
// them), in the base's order, compacted by a scan. Returns the pages listed; below_listed gets
// the OR of their masks.
template <class Scan>
__device__ int plan_below_in_art_order(const MacPagePlanArgs& a, int b, size_t list, int m, int split,
                                       const int* hit_page, const uint32_t* pos_mask, typename Scan::TempStorage& scan,
                                       uint32_t* listed) {
  const int t = threadIdx.x, group = a.group_size(), ps = a.page_size;
  const int32_t* inv = static_cast<const int32_t*>(a.workspace);
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  const size_t at = list * a.max_pages_per_seq, base = a.base_list(b, int(list % a.num_kv_heads));
  int lo = split;
  uint32_t misses = 0;
  for (int g = 0; g < group; ++g) {
    if (hit_page[g] >= 0) lo = min(lo, hit_page[g]);
    else misses |= 1u << g;
  }
  uint32_t mine = 0;
  for (int i = lo + t; i < split; i += kPlanThreads) {
    uint32_t mask = 0;
    for (int g = 0; g < group; ++g)
      mask |= uint32_t(hit_page[g] >= 0 ? i >= hit_page[g] : a.base_is_table || (pos_mask[i] >> g & 1u) != 0u) << g;
    a.below_table[at + (split - 1 - i)] = table[i];
    a.below_masks[at + (split - 1 - i)] = mask;
    mine |= mask;
  }
  int n = max(0, split - lo);
  const int n_base = pages_of(a.base_lens[base], ps);
  for (int j0 = 0; j0 < n_base; j0 += kPlanThreads) {
    const int j = j0 + t;
    const int i = j < n_base ? inv[a.base_table[base * a.max_pages_per_seq + j]] : m;
    const uint32_t mask = i < lo && i < m ? (a.base_is_table ? ~0u : pos_mask[i]) & misses : 0u;
    int pos, total;
    Scan(scan).ExclusiveSum(mask ? 1 : 0, pos, total);
    __syncthreads();
    if (mask) {
      a.below_table[at + n + pos] = table[i];
      a.below_masks[at + n + pos] = mask;
      mine |= mask;
    }
    n += total;
  }
  if (a.below_listed) atomicOr(listed, mine);
  return n;
}

// One CTA per (KV head, row): the base list's masks by position, then every page's mask of
// the group's heads (a hit head: its band+tail; a miss: the base), listed below or above the
// split in position order.
__global__ void __launch_bounds__(kPlanThreads) plan_kernel(const MacPagePlanArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  using Scan = cub::BlockScan<int, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int hit_page[32];
  __shared__ int last_in;  // the list holding the row's last page: 0 none, 1 below, 2 above
  __shared__ uint32_t below_listed;  // mac+art: the OR of below's masks
  const int kvh = blockIdx.x, b = blockIdx.y, t = threadIdx.x, group = a.group_size(), ps = a.page_size;
  const size_t list = size_t(b) * a.num_kv_heads + kvh;
  if (!a.rows.has(b)) {
    pass_through(a, b, kvh, list, t, kPlanThreads, t == 0);
    return;
  }
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * ps), m = pages_of(len, ps);
  const int split = mac_prefix_end(len - 1, a.band_of(b), ps) / ps;
  const int32_t* inv = static_cast<const int32_t*>(a.workspace);
  uint32_t* pos_mask = reinterpret_cast<uint32_t*>(static_cast<char*>(a.workspace) + inverse_bytes(a)) +
                       list * a.max_pages_per_seq;
  const size_t base = a.base_list(b, kvh);
  const int n_base = pages_of(a.base_lens[base], ps);
  if (!a.base_is_table)
    for (int i = t; i < m; i += kPlanThreads) pos_mask[i] = 0u;
  if (t < group) {
    const int begin = a.band_begin[size_t(b) * a.num_heads + kvh * group + t];
    hit_page[t] = begin < 0 ? -1 : begin / ps;
  }
  if (t == 0) last_in = 0, below_listed = 0u;
  const bool art = a.art_order_of(b);  // `below` in ART's order, listed after the walk
  __syncthreads();
  if (!a.base_is_table)  // the base's masks by position (a table base: every page, every head)
    for (int j = t; j < n_base; j += kPlanThreads)
      pos_mask[inv[a.base_table[base * a.max_pages_per_seq + j]]] = a.base_masks ? a.base_masks[base * a.max_pages_per_seq + j] : ~0u;
  __syncthreads();

  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  const size_t at = list * a.max_pages_per_seq;
  int below = 0, above = 0;  // written so far
  for (int chunk = 0; chunk < m; chunk += kPlanThreads * kPlanItems) {
    const int p0 = chunk + t * kPlanItems;
    uint32_t mask[kPlanItems];
    int nb = 0, na = 0;
#pragma unroll
    for (int k = 0; k < kPlanItems; ++k) {
      const int i = p0 + k;
      mask[k] = 0u;
      if (i >= m) continue;
      for (int g = 0; g < group; ++g) {
        const bool attends = hit_page[g] >= 0 ? i >= hit_page[g] : a.base_is_table || (pos_mask[i] >> g & 1u) != 0u;
        mask[k] |= uint32_t(attends) << g;
      }
      if (art && i < split) mask[k] = 0u;  // listed by plan_below_in_art_order
      if (mask[k]) (i < split ? nb : na) += 1;
    }
    // One scan for both lists: below's count in the low 16 bits (a chunk lists < 65536 pages).
    int pos, total;
    Scan(scan).ExclusiveSum(nb | (na << 16), pos, total);
    __syncthreads();
    int pb = below + (pos & 0xffff), pa = above + (pos >> 16);
#pragma unroll
    for (int k = 0; k < kPlanItems; ++k) {
      const int i = p0 + k;
      if (!mask[k]) continue;
      const bool lower = i < split;
      const int slot = lower ? pb++ : pa++;
      (lower ? a.below_table : a.above_table)[at + slot] = table[i];
      (lower ? a.below_masks : a.above_masks)[at + slot] = mask[k];
      if (i == m - 1) last_in = lower ? 1 : 2;
    }
    below += total & 0xffff;
    above += total >> 16;
  }
  __syncthreads();
  if (art) {
    below = plan_below_in_art_order<Scan>(a, b, list, m, split, hit_page, pos_mask, scan, &below_listed);
    if (t == 0 && m - 1 < split) last_in = 1;
    __syncthreads();
  }
  if (t == 0) {
    if (a.below_listed) a.below_listed[list] = below_listed;  // 0 for a row not in ART's order
    const int short_by = m * ps - len;  // tokens the last page lacks
    const int bl = below * ps - (last_in == 1 ? short_by : 0), al = above * ps - (last_in == 2 ? short_by : 0);
    a.below_lens[list] = bl;
    a.above_lens[list] = al;
    // mac+art's `below` is counted by ART's kernel, which reads part of it (its stats)
    if (a.listed_tokens) atomicAdd(a.listed_tokens, (unsigned long long)(art ? al : bl + al));
  }
}

// A dense base (base_is_table): the row's own table, every page for a missing head and pages
// from its band's first on for a hitting one, so the listed pages are one range [lo, m) (lo: 0
// with a missing head, else the smallest hit page) split at the prefix end; a page's slot follows
// from its index, so a thread per (KV head, row, page) plans it, no scan. The same lists and
// masks as plan_kernel's.
__global__ void __launch_bounds__(kPlanThreads) plan_table_kernel(const MacPagePlanArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  const int kvh = blockIdx.x, b = blockIdx.y, t = threadIdx.x, group = a.group_size(), ps = a.page_size;
  const int i = blockIdx.z * kPlanThreads + t;  // this thread's page
  const bool lead = blockIdx.z == 0 && t == 0;
  const size_t list = size_t(b) * a.num_kv_heads + kvh, at = list * a.max_pages_per_seq;
  if (!a.rows.has(b)) {  // another policy's row: its base list whole as `above`, a page a thread
    pass_through(a, b, kvh, list, i, a.max_pages_per_seq, lead);
    return;
  }
  const int len = min(max(a.seq_lens[b], 0), a.max_pages_per_seq * ps), m = pages_of(len, ps);
  const int split = mac_prefix_end(len - 1, a.band_of(b), ps) / ps;
  uint32_t hits = 0;  // heads that hit
  int lo = m, hit_page[32];
  for (int g = 0; g < group; ++g) {
    const int begin = a.band_begin[size_t(b) * a.num_heads + kvh * group + g];
    hit_page[g] = begin < 0 ? -1 : begin / ps;
    if (begin < 0) lo = 0;
    else hits |= 1u << g, lo = min(lo, hit_page[g]);
  }
  if (i < m && i >= lo) {
    uint32_t mask = 0;
    for (int g = 0; g < group; ++g) mask |= uint32_t(!(hits >> g & 1u) || i >= hit_page[g]) << g;
    const bool lower = i < split;
    const int slot = lower ? i - lo : i - max(lo, split);
    (lower ? a.below_table : a.above_table)[at + slot] = a.page_table[size_t(b) * a.max_pages_per_seq + i];
    (lower ? a.below_masks : a.above_masks)[at + slot] = mask;
  }
  if (lead) {
    const int below = max(0, split - lo), above = max(0, m - max(lo, split));
    const int short_by = m * ps - len;  // tokens the last page lacks
    const bool last_listed = m > 0 && m - 1 >= lo;
    const int bl = below * ps - (last_listed && m - 1 < split ? short_by : 0);
    const int al = above * ps - (last_listed && m - 1 >= split ? short_by : 0);
    a.below_lens[list] = bl;
    a.above_lens[list] = al;
    if (a.below_listed) a.below_listed[list] = 0u;  // a table base is never in ART's order
    if (a.listed_tokens) atomicAdd(a.listed_tokens, (unsigned long long)(bl + al));
  }
}

// ---- merge and push ----

// One CTA of head_dim threads per (row, query head), a thread an element (mac_merge_state.cuh).
__global__ void merge_push_kernel(const MacMergePushArgs a) {
  detail::pdl_enter();  // launched by launch_pdl
  const int t = threadIdx.x;
  const detail::MacMergeTarget target = detail::mac_merge_target(a, blockIdx.y, blockIdx.x);
  const MacMergeArgs& mg = a.merge;
  const size_t at = target.i * mg.head_dim + t;
  const float below[1] = {mg.below_o[at]};
  const float above = mg.above_o ? mg.above_o[at] : 0.0f;
  (void)detail::mac_merge_push_elements<1>(a, target, detail::MacFillView::kLatest, t,
                                           detail::mac_load_reused<1>(a, target, t), below,
                                           mg.below_lse[target.i], mg.above_o ? &above : nullptr,
                                           mg.above_o ? mg.above_lse[target.i] : -INFINITY, [] { __syncthreads(); });
}

// After every head has pushed: each slot's ring holds its run's entries more (its oldest
// dropped past K; both views of its fill); the last row of a run of rows of one slot advances it.
__global__ void advance_kernel(const MacMergePushArgs a, int batch) {
  detail::pdl_enter();  // launched by launch_pdl
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int slot = a.row_slot ? a.row_slot[b] : -1;
  const MacRowRule& rule = *mac_rule_of(a.rules, a.row_policy, b);
  if (slot < 0 || !rule.active || (b + 1 < batch && a.row_slot[b + 1] == slot)) return;
  int rows = 1;
  while (b - rows >= 0 && a.row_slot[b - rows] == slot) ++rows;
  int32_t* latest = mac_fill_latest(a.rings.fill, slot);
  mac_fill_advance(latest, rows, rule.window, latest);
  mac_fill_step(a.rings.fill, slot)[0] = latest[0];
  mac_fill_step(a.rings.fill, slot)[1] = latest[1];
}

__global__ void prefix_lens_kernel(const int32_t* positions, int n, int band, int page_size, int32_t* lens) {
  detail::pdl_enter();  // launched by launch_pdl
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < n) lens[r] = mac_prefix_end(positions[r], band, page_size);
}

bool supported_dims(int heads, int kv_heads, int d) {
  return heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && heads / kv_heads <= 32 && (d == 64 || d == 128);
}

}  // namespace

cudaError_t mac_match(const MacMatchArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.num_heads <= 0 || (a.head_dim != 64 && a.head_dim != 128) || a.page_size <= 0)
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  (void)launch_pdl(a.head_dim == 128 ? match_kernel<128> : match_kernel<64>, dim3(a.num_heads, a.batch),
                   kMatchThreads, 0, stream, a);
  return cudaGetLastError();
}

size_t mac_page_plan_workspace_size(const MacPagePlanArgs& a) {
  if (a.batch < 0 || a.num_pool_pages <= 0 || !supported_dims(a.num_heads, a.num_kv_heads, 64)) return 0;
  return inverse_bytes(a) + mask_bytes(a);
}

cudaError_t mac_page_plan(const MacPagePlanArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.page_size <= 0 || a.max_pages_per_seq <= 0 || a.band < 0 || a.workspace == nullptr ||
      mac_page_plan_workspace_size(a) == 0 || a.workspace_bytes < mac_page_plan_workspace_size(a))
    return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  if (a.base_is_table && a.art_order) return cudaErrorInvalidValue;  // ART's order needs a base list
  if (a.base_is_table) {  // a thread per page: no inverse map, no scan
    const unsigned chunks = unsigned((a.max_pages_per_seq + kPlanThreads - 1) / kPlanThreads);
    (void)launch_pdl(plan_table_kernel, dim3(a.num_kv_heads, a.batch, chunks), kPlanThreads, 0, stream, a);
    return cudaGetLastError();
  }
  if (!a.index_ready)
    page_index_map(a.page_table, a.seq_lens, a.batch, a.max_pages_per_seq, a.page_size,
                   static_cast<int32_t*>(a.workspace), stream);
  (void)launch_pdl(plan_kernel, dim3(a.num_kv_heads, a.batch), kPlanThreads, 0, stream, a);
  return cudaGetLastError();
}

cudaError_t mac_merge_push(const MacMergePushArgs& a, cudaStream_t stream) {
  const MacMergeArgs& m = a.merge;
  if (m.batch < 0 || m.num_heads <= 0 || (m.head_dim != 64 && m.head_dim != 128)) return cudaErrorInvalidValue;
  if (m.batch == 0) return cudaSuccess;
  (void)launch_pdl(merge_push_kernel, dim3(m.num_heads, m.batch), m.head_dim, 0, stream, a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || !a.row_slot) return e;
  (void)launch_pdl(advance_kernel, (m.batch + 127) / 128, 128, 0, stream, a, m.batch);
  return cudaGetLastError();
}

cudaError_t mac_prefix_lens(const int32_t* positions, int n, int band, int page_size, int32_t* lens,
                            cudaStream_t stream) {
  if (n < 0 || band < 0 || page_size <= 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  (void)launch_pdl(prefix_lens_kernel, (n + 127) / 128, 128, 0, stream, positions, n, band, page_size, lens);
  return cudaGetLastError();
}

}  // namespace skim::cuda
