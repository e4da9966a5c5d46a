// Arguments of the dense page plan, shared by the CUDA kernel and its CPU reference
// (skim::cuda::dense_page_plan and skim::cpu::dense_page_plan take the same struct).
//
// Every key, written in the per-(row, KV head) plan layout that selection kernels write
// (group_page_select_args.h): each planned row's page table copied to each of its KV heads'
// lists, with its length, and a mask of ~0u per page (every head attends it) when out_masks is
// set. A batch that mixes policies plans its dense rows (dense sequences, and the dense layers
// of a selecting policy) this way, beside the other rows' selections in the same plan.
//
// Layouts: page_table int32 [batch][max_pages_per_seq], seq_lens int32 [batch];
// out_table (and out_masks) [batch][num_kv_heads][max_pages_per_seq], out_lens
// [batch][num_kv_heads]. Rows outside `rows` are not written.
#pragma once

#include <cstdint>

#include "attention/plan_rows.h"

namespace skim {

struct DensePagePlanArgs {
  int batch = 0, num_kv_heads = 0, page_size = 16, max_pages_per_seq = 0;
  const int32_t *page_table = nullptr, *seq_lens = nullptr;
  int32_t* out_table = nullptr;
  uint32_t* out_masks = nullptr;
  int32_t* out_lens = nullptr;
  PlanRows rows{};
};

}  // namespace skim
