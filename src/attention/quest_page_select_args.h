// Arguments of Quest's page selection, shared by the CPU kernels and (to come) the CUDA one:
// cpu::quest_page_select reads and writes this struct, for bf16 (the GPU cache's, the CUDA
// kernel's oracle) and fp32 elements (the CPU cache's, what the CPU policy `quest` runs).
//
// For one decode step of a batch, per (sequence, query head): every page scored by Quest's
// bound sum_i max(q_i kmin_i, q_i kmax_i), the newest page forced in, and the n best kept
// (ties to the lower page index), n = quest_pages_kept(context). The output, per (sequence,
// KV head), is the union of its group's pages in position order (the newest, the only partial
// one, last) with a mask per listed page of the heads that keep it: the page plan
// paged_decode_attention reads with tables_per_kv_head and head_masks.
//
// Layouts (row-major), elements bf16 (QuestPageSelectArgs) or fp32 (QuestPageSelectArgsF32):
//   q           [batch][num_heads][head_dim]        (post-RoPE)
//   kmin/kmax   [num_pages][num_kv_heads][head_dim]  (the page digests; kmin <= kmax in every
//               element of a scored page, as the min and max of its written keys: the CUDA
//               kernel takes q kmax where q >= 0 and q kmin elsewhere)
//   page_table  int32 [batch][max_pages_per_seq], seq_lens int32 [batch]
//   out_table   int32 [batch][num_kv_heads][max_pages_per_seq] (slots past the list untouched)
//   out_masks   uint32, the same shape: bit g = query head g of the group keeps the page
//   out_lens    int32 [batch][num_kv_heads]             (tokens in the listed pages)
// Rows outside `rows` (plan_rows.h) are not planned: their lists stay as they are.
// With by_score the union comes in descending order of its pages' best bound over the heads
// that keep them (ties in position order), the newest page first: ART's visiting order
// (art_decode_args.h: the partial page first).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/plan_rows.h"
#include "core/host_device.h"

namespace skim {

// Tokens a relative or absolute budget allows at `context` tokens: budget <= 1 is a fraction of
// the context with a floor of min_tokens, budget > 1 is tokens; never more than the context.
SKIM_HOST_DEVICE inline int quest_budget_tokens(double budget, int min_tokens, int context) {
  double tokens = budget;
  if (budget <= 1.0) {
    const double x = budget * double(context);
    tokens = double(int(x));
    if (tokens < x) tokens += 1.0;  // ceil without <cmath>
    if (tokens < double(min_tokens)) tokens = double(min_tokens);
  }
  return tokens < double(context) ? int(tokens) : context;
}

// Pages each query head keeps at `context` tokens: the budget in whole pages, at least one.
SKIM_HOST_DEVICE inline int quest_pages_kept(double budget, int min_tokens, int context, int page_size) {
  const int n = (quest_budget_tokens(budget, min_tokens, context) + page_size - 1) / page_size;
  return n > 1 ? n : 1;
}

template <class Elem>
struct QuestPageSelectArgsOf {
  // Shapes (head_dim 64 or 128 on the GPU; at most 32 query heads per KV head).
  int batch = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 16, max_pages_per_seq = 0;
  double budget = 0.5;    // as QuestParams::budget
  int min_tokens = 3072;  // as QuestParams::min_tokens
  bool by_score = false;  // the union by descending best bound, the newest page first

  // Inputs and outputs, in the layouts above.
  const Elem *q = nullptr, *kmin = nullptr, *kmax = nullptr;
  const int32_t *page_table = nullptr, *seq_lens = nullptr;
  int32_t* out_table = nullptr;
  uint32_t* out_masks = nullptr;
  int32_t* out_lens = nullptr;
  PlanRows rows{};
  // When set, the tokens of every list written are added to it: what the plan makes the
  // kernel read (the union), counted where it is made (on the GPU a device counter, read back
  // outside the decode step).
  unsigned long long* listed_tokens = nullptr;

  // GPU only: cuda::quest_page_select_workspace_size(*this) bytes; no zeroing needed.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  SKIM_HOST_DEVICE int group_size() const { return num_kv_heads > 0 ? num_heads / num_kv_heads : 0; }
};

using QuestPageSelectArgs = QuestPageSelectArgsOf<uint16_t>;  // bf16 bits: the GPU cache
using QuestPageSelectArgsF32 = QuestPageSelectArgsOf<float>;  // the CPU cache

}  // namespace skim
