// Arguments of group page selection, shared by the CUDA kernels and their CPU reference
// (skim::cuda::group_page_select and skim::cpu::group_page_select take the same struct).
//
// ReSA's group block-sparse selection (DESIGN.md section 9; the CPU policy is `gbsa`,
// attention/selectors.h) for one decode step of a batch: per (sequence, KV head), the group's
// query heads pooled by their mean, every page scored by Quest's bound sum_i max(q_i kmin_i,
// q_i kmax_i), the n_local most recent pages forced in (the newest first of all), and the top
// n = min(M, max(n_min, ceil(M * keep))) of the M pages kept; ties go to the lower page index.
// The output is a page list per (sequence, KV head) in position order, ready for
// paged_decode_attention with tables_per_kv_head: the newest page, the only partial one, last
// (with by_score, in descending bound order, the newest page first).
//
// Layouts (row-major), elements bf16 (GroupPageSelectArgs, the GPU cache's) or fp32
// (GroupPageSelectArgsF32, the CPU cache's):
//   q           [batch][num_heads][head_dim]       (post-RoPE, as attention sees it)
//   kmin/kmax   [num_pages][num_kv_heads][head_dim] (the page digests: exact for the keys'
//               element type, as the cache holds them; kmin <= kmax in every element of a
//               scored page, which the CUDA kernel's bound relies on)
//   page_table  int32 [batch][max_pages_per_seq], seq_lens int32 [batch]
//   out_table   int32 [batch][num_kv_heads][max_pages_per_seq] (slots past the list untouched)
//   out_lens    int32 [batch][num_kv_heads]             (tokens in the listed pages)
//   out_masks   uint32, out_table's shape, optional: ~0u for each listed page (every head of
//               the group attends it), for a plan that other rows fill with per-head masks
// Rows outside `rows` (plan_rows.h) are not planned: their lists stay as they are.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/plan_rows.h"
#include "core/host_device.h"  // the helpers below run on the host and in the kernels

namespace skim {

// Pages ReSA's selection keeps of a sequence with m pages: min(m, max(n_min, ceil(m * keep))),
// in double on the host and in the kernels alike (the CPU policy `gbsa` uses it too).
SKIM_HOST_DEVICE inline int group_pages_kept(int m, double keep, int n_min) {
  if (m <= 0) return 0;
  const double x = double(m) * keep;
  int n = int(x);
  if (double(n) < x) ++n;  // ceil without <cmath>
  n = n > n_min ? n : n_min;
  return n < m ? n : m;
}

template <class Elem>
struct GroupPageSelectArgsOf {
  int batch = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // 64 or 128 on the GPU
  int page_size = 16;
  int max_pages_per_seq = 0;
  double keep = 0.1;  // fraction of the pages kept
  int n_min = 16;     // at least this many pages
  int n_local = 1;    // most recent pages always kept
  // The kept pages in descending bound order instead of position order: the newest first, then
  // the other forced pages by position, then by bound (ties by position). ART's visiting order:
  // its lists list the partial page first (attention/art_decode_args.h).
  bool by_score = false;

  const Elem* q = nullptr;
  const Elem* kmin = nullptr;
  const Elem* kmax = nullptr;
  const int32_t* page_table = nullptr;
  const int32_t* seq_lens = nullptr;
  int32_t* out_table = nullptr;
  int32_t* out_lens = nullptr;
  uint32_t* out_masks = nullptr;
  PlanRows rows{};

  // GPU only: cuda::group_page_select_workspace_size(*this) bytes (page keys); no zeroing needed.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  SKIM_HOST_DEVICE int group_size() const { return num_kv_heads > 0 ? num_heads / num_kv_heads : 0; }
  SKIM_HOST_DEVICE int pages_kept(int m) const { return group_pages_kept(m, keep, n_min); }
};

using GroupPageSelectArgs = GroupPageSelectArgsOf<uint16_t>;  // bf16 bits: the GPU cache
using GroupPageSelectArgsF32 = GroupPageSelectArgsOf<float>;  // the CPU cache

}  // namespace skim
