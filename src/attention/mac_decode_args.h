// Arguments of MAC's decode stages around the paged decode kernel, shared by the CUDA kernels
// and their CPU references (skim::cuda:: and skim::cpu::mac_page_plan / mac_merge_states take
// the same structs): the page plan before the kernel, the merge of states after it.
//
// MAC-Attention (seeds/002; attention/mac.h) on page lists. For a decode row at position m
// (len = m + 1 tokens), the state cached for m covers the keys [0, split) with
// split = mac_prefix_end(m, band, page_size): the paper's [1, m - r] (1-based) rounded down to
// a whole page, so every part below is a list of whole pages the paged decode kernel reads.
// Per query head g, the keys of the output are:
//   a hit on ring entry p: the band+tail [mac_prefix_end(p), len), the rest is the cached state;
//   a miss: the base policy's pages (every page for dense, a selection for quest/gbsa/...).
// The plan cuts each head's pages at split into two lists per (row, KV head):
//   below: its pages < split  (merged into the cached state: the state cached for m)
//   above: its pages >= split (merged with that for the output)
// Each list is the union of the group's heads' pages in position order with a per-head mask
// (PagedDecodeArgs::head_masks), so the kernel reads a page once for the group; `below`'s pages
// are all full, `above` ends with the row's newest page. A head with no page in a list gets
// the empty state (0, -inf), which merges as nothing.
//
// mac+art (art_order, or the row's rule's): `below` is read by ART's kernel (art_decode_args.h),
// which stops early, so it comes in ART's visiting order instead: first the pages some hit head
// attends (its band's part below the split, which MAC recomputes), newest first, so a hit head
// has its keys in the first rounds; then the others in the base list's order (the base being
// ART's visiting plan, in any order: its pages are placed by position through the row's table).
// below_listed (optional, [batch][num_kv_heads]): the OR of each such `below` list's masks, the
// heads ART's kernel must not wait for (ArtDecodeArgs::heads_listed); 0 for the other rows.
// `above` stays in position order. The GPU needs a base list for it (not base_is_table).
//
// Layouts: page_table int32 [batch][max_pages_per_seq], seq_lens int32 [batch] (the rows' own
// tables); base_table / base_masks [base lists][max_pages_per_seq], base_lens [base lists]
// (base lists: batch, or batch x num_kv_heads with base_per_kv_head; base_masks null: every
// head attends every listed page); band_begin int32 [batch][num_heads]: a hit's first key
// (a multiple of page_size), or -1 for a miss; outputs [batch][num_kv_heads][max_pages_per_seq]
// and lens [batch][num_kv_heads].
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/plan_rows.h"
#include "attention/method_defaults.h"
#include "core/host_device.h"

namespace skim {

// The end of the prefix whose state MAC caches for the token at `pos`: the keys below
// pos + 1 - band, rounded down to a page boundary (0 when none).
SKIM_HOST_DEVICE inline int mac_prefix_end(int pos, int band, int page_size) {
  const int end = pos + 1 - band;
  return end <= 0 ? 0 : end / page_size * page_size;
}

struct MacRowRule;

struct MacPagePlanArgs {
  int batch = 0, num_heads = 0, num_kv_heads = 0, page_size = 16, max_pages_per_seq = 0;
  int band = kMacBand;  // r, unless each row's comes from its policy's rule (rules, row_policy)
  const MacRowRule* rules = nullptr;
  const int32_t* row_policy = nullptr;
  const int32_t *page_table = nullptr, *seq_lens = nullptr;
  bool base_per_kv_head = false;
  const int32_t *base_table = nullptr, *base_lens = nullptr;
  const uint32_t* base_masks = nullptr;
  // A hint, the plan is the same without it: the base lists are the rows' own tables (a dense
  // base: base_table == page_table, base_lens == seq_lens, one list per row, no masks), so a
  // miss attends every page and the GPU needs no inverse page map.
  bool base_is_table = false;
  bool art_order = false;  // `below` in ART's order (above), unless each row's rule says
  const int32_t* band_begin = nullptr;
  int32_t *below_table = nullptr, *below_lens = nullptr, *above_table = nullptr, *above_lens = nullptr;
  uint32_t *below_masks = nullptr, *above_masks = nullptr;
  uint32_t* below_listed = nullptr;
  PlanRows rows{};
  unsigned long long* listed_tokens = nullptr;
  int num_pool_pages = 0;
  // GPU only: the workspace's inverse page map already holds this step's (an earlier layer's
  // call made it: it depends on the page tables alone).
  bool index_ready = false;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  SKIM_HOST_DEVICE int group_size() const { return num_kv_heads > 0 ? num_heads / num_kv_heads : 0; }
  SKIM_HOST_DEVICE size_t base_list(int b, int h) const {
    return base_per_kv_head ? size_t(b) * num_kv_heads + h : size_t(b);
  }
  SKIM_HOST_DEVICE int band_of(int b) const;
  SKIM_HOST_DEVICE bool art_order_of(int b) const;
};

// Pass-through rows: rows outside `rows` (a batch mixing MAC with other policies) get their
// base list whole as `above` (masks copied, or ~0u) and an empty `below`, so their output is
// the base policy's attention.
//
// GPU only: listed_tokens (optional, device) adds the tokens of the lists of the rows in `rows`,
// the K/V the kernel reads for MAC (the other rows' policies count theirs; mac+art's `below`,
// read in part, ART's kernel counts); workspace holds an inverse page map of the pool (num_pool_pages ints) and a
// per-position mask for each list (batch x num_kv_heads x max_pages_per_seq uint32).

// After the kernel has attended both lists: per (row, query head), the state cached for m is
// the reused prefix (a hit's ring state, or nothing) merged with the part below the split, and
// the output is that merged with the part above it. Nothing is subtracted.
//   below_o / above_o / out fp32 [batch][num_heads][head_dim], below_lse / above_lse [batch][num_heads]
//   cache_o [batch][num_heads][head_dim], cache_lse [batch][num_heads]: in, the reused prefix
//   ((0, -inf) on a miss); out, the state cached for m (the row's new ring entry)
//   above_o / above_lse null: no part above (a prompt row's prefix state); out null: not written
struct MacMergeArgs {
  int batch = 0, num_heads = 0, head_dim = 0;
  const float *below_o = nullptr, *below_lse = nullptr, *above_o = nullptr, *above_lse = nullptr;
  float *cache_o = nullptr, *cache_lse = nullptr, *out = nullptr;
};

// ---- the GPU's rings and the kernels around them (backend/cuda/mac_decode.cuh) ----
//
// One policy's MAC parameters, by policy index (a batch mixing policies: inactive rows have no
// rings and pass through).
struct MacRowRule {
  int active = 0;
  int window = kMacWindow;  // K: the row's ring capacity (at most the rings' capacity)
  int band = kMacBand;      // r
  float tau = float(kMacTau);
  int min_context = kMacMinContext;  // rows with a shorter context match nothing (their ring still fills)
  int art_order = 0;  // mac+art: `below` in ART's order (MacPagePlanArgs), read by ART's kernel
};

// The rings of one layer for every sequence slot: per slot K entries, each a token's pre-RoPE
// queries (bf16, what the GPU's match reads) and its per-head state over its prefix (fp32).
// fill [slots][kMacFillInts]: two views of the slot's ring, each {first, count}, the storage
// index of the oldest entry and the number of entries (entry i in age order lives at
// (first + i) % window, window the row's rule's K):
//   latest (ints 2, 3): after every push so far; the match reads it.
//   step (ints 0, 1): as the step's match saw it (the match copies latest into it). The GPU's
//     chunk-merge epilogue (MacMergePushEpilogue) pushes after it and one of its blocks writes
//     latest, so no push waits for another's.
// Every other push (mac_merge_push, both backends) reads latest and writes both.
constexpr int kMacFillInts = 4;
SKIM_HOST_DEVICE inline int32_t* mac_fill_step(int32_t* fill, int slot) { return fill + kMacFillInts * slot; }
SKIM_HOST_DEVICE inline int32_t* mac_fill_latest(int32_t* fill, int slot) { return fill + kMacFillInts * slot + 2; }

// {first, count} after `rows` more entries pushed past `from` (its oldest dropped past the
// window K); `to` may be `from`.
SKIM_HOST_DEVICE inline void mac_fill_advance(const int32_t* from, int rows, int window, int32_t* to) {
  const int first = from[0], total = from[1] + rows;
  to[0] = (first + (total > window ? total - window : 0)) % window;
  to[1] = total < window ? total : window;
}

struct MacRingsView {
  int capacity = 0;            // entries per slot, the largest rule's window
  uint16_t* q_pre = nullptr;   // [slots][capacity][num_heads][head_dim]
  float* o = nullptr;          // [slots][capacity][num_heads][head_dim]
  float* lse = nullptr;        // [slots][capacity][num_heads]
  int32_t* pos = nullptr;      // [slots][capacity]
  int32_t* fill = nullptr;     // [slots][kMacFillInts]
};

SKIM_HOST_DEVICE inline int MacPagePlanArgs::band_of(int b) const {
  return rules ? rules[row_policy ? row_policy[b] : 0].band : band;
}
SKIM_HOST_DEVICE inline bool MacPagePlanArgs::art_order_of(int b) const {
  return rules ? rules[row_policy ? row_policy[b] : 0].art_order != 0 : art_order;
}

// Match: per (row, query head) of a row whose policy is active, the ring entry nearest in L2
// distance of pre-RoPE queries (ties: the most recent), a hit when the distance is below
// sqrt(2d)(1 - tau) (the squared distance in fp32, summed as 32 lane partials of d/32 dims each,
// fma in order, then an xor butterfly over the lanes: both backends alike, bit for bit):
// band_begin = mac_prefix_end(entry's position), hit_entry = its storage
// index; else -1 both. Inactive rows, and rows whose context is below the rule's min_context
// (no scan): -1. Every row with a slot copies its fill's latest view into its step view
// (MacRingsView). bytes (optional, device) adds the ring entries'
// queries scanned and the cached states of hits, in bytes.
struct MacMatchArgs {
  int batch = 0, num_heads = 0, head_dim = 0, page_size = 16;
  const uint16_t* q_pre = nullptr;       // [batch][num_heads][head_dim] bf16
  const int32_t* positions = nullptr;    // [batch]: a row's context is its position + 1
  const int32_t* row_slot = nullptr;     // [batch] ring slot, -1 for none
  const int32_t* row_policy = nullptr;   // [batch] policy index; null: rules[0] for every row
  const MacRowRule* rules = nullptr;
  MacRingsView rings;
  int32_t* band_begin = nullptr;         // [batch][num_heads]
  int32_t* hit_entry = nullptr;          // [batch][num_heads]
  unsigned long long* bytes = nullptr;
  // Benchmarks only (skim bench's forced hit rates): >= 0, a head with a nearest entry hits iff
  // mac_forced_hit(row, head, position) < forced_hits (per mille), whatever its distance.
  int forced_hits = -1;
};

// A pseudo-random number in [0, 1000) per (row, head, position): which heads a forced hit rate
// picks, the same on both backends.
SKIM_HOST_DEVICE inline int mac_forced_hit(int row, int head, int position) {
  uint32_t x = uint32_t(row) * 73856093u ^ uint32_t(head) * 19349663u ^ uint32_t(position) * 83492791u;
  x *= 2654435761u;
  return int((x >> 8) % 1000u);
}

// Merge and push: per (row, query head), cache = the hit entry's state (or empty), merged with
// the part below the split; out = cache merged with the part above; for an active row the
// new ring entry (its pre-RoPE query, cache and position) is written over the oldest once the
// ring is full, then the row's fill advances (both views, from latest; the GPU's chunk-merge
// epilogue: latest from step, MacRingsView). Consecutive rows of one slot (a prompt chunk's
// last rows) append in their order. cache_o/cache_lse are scratch of merge's shape.
struct MacMergePushArgs {
  MacMergeArgs merge;
  float* out_lse = nullptr;              // [batch][num_heads] the output's lse (optional)
  uint16_t* out_bf16 = nullptr;          // GPU only, optional: merge.out as bf16 here instead
  const int32_t* hit_entry = nullptr;    // match's
  const int32_t* row_slot = nullptr;
  const int32_t* positions = nullptr;    // [batch]
  const uint16_t* q_pre = nullptr;
  const int32_t* row_policy = nullptr;
  const MacRowRule* rules = nullptr;
  MacRingsView rings;
};

}  // namespace skim
