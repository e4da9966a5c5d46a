// Arguments of CSAttention's kernels (seeds/004; the CPU policy is attention/csattn.h), over one
// (sequence, KV group)'s tables in CsGroupTables' flat layout: the build of a subspace's
// centroids and lists from the prompt (CsBuildArgs), the streaming insert of a new key
// (CsInsertArgs), and the decode-time search (CsSelectArgs), one per (row, KV group) with the
// group's mean query or per (row, query head). CPU implementations in backend/cpu/cs_kernels.h,
// which the CPU policy runs; a device implementation takes the same structs.
//
// The search:
// A search, over its (sequence, KV group)'s tables (CsTablesView: CsGroupTables' flat layout):
//   1. per subspace m: the query's slice q_m, its norm, and the nearest centroid by cosine (the
//      first of equal ones); when that cosine is below `backoff`, the `backoff_top` nearest;
//   2. every entry (key, score) of the chosen centroids' lists adds w_m (score - floor) to the
//      key's sum: w_m = |q_m| with score_dot (the partial scores approximate q.k), else 1;
//      floor = the list's tail (the mean score of the prompt keys it left out) with
//      missing_mean, else 0;
//   3. of the keys summed ("touched") below window_begin, the n_pick largest sums (ties: the
//      smaller position), given in ascending position, or with by_score by descending sum
//      (ties by position), the order a traversal follows.
// The recent window [window_begin, context) is the caller's to add.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace skim {

// One (sequence, KV group)'s tables. M subspaces of ds = head_dim / M, C centroids each, lists
// of capacity L; list l = m * C + c.
struct CsTablesView {
  const float* centroids = nullptr;    // [M][C][ds], unit
  const int32_t* list_index = nullptr; // [M][C][L] key positions; the first list_size[l] in use
  const uint16_t* list_score = nullptr;  // [M][C][L] fp16
  const int32_t* list_size = nullptr;  // [M][C]
  const float* tail = nullptr;         // [M][C]
};

// Added to by a call (host memory for the CPU one).
struct CsSelectStats {
  uint64_t table_bytes = 0;        // list entries (int32 + fp16) and tails read
  uint64_t candidates = 0;         // keys touched, summed over the searches
  uint64_t subspace_searches = 0;
  uint64_t backoffs = 0;           // subspace searches that widened to backoff_top
  double best_cos = 0;             // the nearest centroid's cosine, summed
};

struct CsSelectArgs {
  int searches = 0;
  // list_capacity: the elements between consecutive lists (a search reads list_size entries of
  // each, at most this many), so tables of smaller capacities laid out at one stride share a call.
  int head_dim = 0, subspaces = 0, centroids = 0, list_capacity = 0;
  bool score_dot = true, missing_mean = true, by_score = false;
  double backoff = 0.0;
  int backoff_top = 1;

  const float* queries = nullptr;        // [searches][head_dim]
  const CsTablesView* tables = nullptr;  // [searches]
  const int32_t* context = nullptr;      // [searches] keys visible: every list key is below it
  const int32_t* window_begin = nullptr; // [searches] <= context
  const int32_t* n_pick = nullptr;       // [searches] keys to pick below window_begin
  int max_picks = 0;                     // row stride of picks, >= every window_begin
  int32_t* picks = nullptr;              // [searches][max_picks]
  int32_t* pick_counts = nullptr;        // [searches]: min(n_pick, keys touched below window_begin)
  // Optional, [searches][candidate_stride]: 1 for each key some chosen list holds, 0 for the
  // others in [0, context) (what a perfect ranking could choose from: recall studies).
  uint8_t* candidates = nullptr;
  int candidate_stride = 0;
  CsSelectStats* stats = nullptr;        // optional
  // Optional, [searches]: nonzero skips the search, which then writes nothing (its picks and
  // count keep what they held): a search period above 1 (cs:step) keeps the last search's.
  const uint8_t* skip = nullptr;
};

}  // namespace skim

namespace skim {

// The streaming insert of CSAttention (a decode step's new key into its group's tables): per
// subspace m and centroid c, the key slice's score (c . k_m with score_dot, else the cosine)
// enters list (m, c) when it beats the list's minimum (TopList::try_insert: an equal fp16
// score never displaces an earlier arrival).
struct CsInsertArgs {
  int head_dim = 0, subspaces = 0, centroids = 0, list_capacity = 0;
  // Elements between consecutive lists, >= list_capacity; 0: list_capacity. Tables laid out for
  // the largest capacity serve sequences of smaller ones (the GPU: one stride for every slot).
  int list_stride = 0;
  bool score_dot = true;
  const float* centroids_data = nullptr;  // [M][C][ds], unit (CsTablesView::centroids)
  int32_t* list_index = nullptr;          // [M][C][stride]
  uint16_t* list_score = nullptr;         // [M][C][stride] fp16
  int32_t* list_size = nullptr;           // [M][C]
  // Optional [M][C]: each list's TopList::admit_key(), kept up to date, so that the many scores
  // no list takes are refused without touching the lists (the CPU's; a device may do without).
  int* admit = nullptr;
  const float* key = nullptr;  // [head_dim]
  int32_t position = 0;

  SKIM_HOST_DEVICE size_t stride() const { return size_t(list_stride > 0 ? list_stride : list_capacity); }
};

}  // namespace skim

namespace skim {

// The build of subspace m of one (sequence, KV group)'s tables from its prompt:
//   1. centroids: cosine k-means (backend/cpu/kmeans.h, seed 0x5eed0000 + m) of slice m of the
//      group's prompt (query, head) vectors, normalised; a strided sample of at most max_points
//      of them (every ceil(n / max_points)-th);
//   2. list (m, c): the min(L, num_keys) prompt keys of largest partial score c . k_m (the key
//      slice normalised when !score_dot), ties to the smaller position; its tail: the mean
//      score of the keys it left out (0 when none is).
// Keys are read from the paged cache: key j is row j % page_size of page pages[j / page_size],
// KV head kv_head ([num_pages][num_kv_heads][page_size][head_dim]), elements KeyElem: fp32 (the
// CPU cache, CsBuildArgs) or bf16 bits (the GPU cache, CsBuildArgsBf16).
template <class KeyElem>
struct CsBuildArgsOf {
  int head_dim = 0, subspaces = 0, centroids = 0, iters = 0, max_points = 0, list_capacity = 0;
  int list_stride = 0;  // elements between consecutive lists, >= list_capacity; 0: list_capacity
  bool score_dot = true;
  int subspace = 0;                 // m
  const float* vectors = nullptr;   // [num_vectors][head_dim]
  int num_vectors = 0;
  const KeyElem* k_pool = nullptr;
  const int32_t* pages = nullptr;
  int page_size = 16, num_kv_heads = 0, kv_head = 0, num_keys = 0;
  // Out, the group's tables (slice m written): [M][C][ds], [M][C][stride] twice, [M][C] twice.
  float* centroids_out = nullptr;
  int32_t* list_index = nullptr;
  uint16_t* list_score = nullptr;
  int32_t* list_size = nullptr;
  float* tail = nullptr;

  SKIM_HOST_DEVICE size_t stride() const { return size_t(list_stride > 0 ? list_stride : list_capacity); }
};

using CsBuildArgs = CsBuildArgsOf<float>;
using CsBuildArgsBf16 = CsBuildArgsOf<uint16_t>;

}  // namespace skim
