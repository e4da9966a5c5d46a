// RetroAttention's decode stages on the GPU (contracts and layouts in
// attention/retro_decode_args.h; CPU references skim::cpu::retro_page_plan and retro_merge,
// same names and arguments). Around paged_decode_attention, inside the decode step's graph.
//
//   retro_page_plan: an inverse map of the rows' pages; one CTA per (row, KV head): every row
//     not a past one copies its base list; a newest row in a sparse layer then updates its
//     units' masks (A[current] = t-1, then each listed page's old value recorded and A = t);
//     then one CTA per (past row, KV head) lists, with a block-wide scan, its newest row's pages
//     whose old value is below its step, per head.
//   retro_merge: past rows first (their cached state merged with the new one), then newest rows
//     (their state cached), so a past row reads its entry before the newest row's may replace it.
// This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/retro_decode_args.h"

namespace skim::cuda {

size_t retro_page_plan_workspace_size(const RetroPagePlanArgs& args);
// Device pointers in args; asynchronous on `stream`. cudaErrorInvalidValue for unsupported
// shapes (groups of at most 32 heads, head_dim 64 or 128 for the merge) or a small workspace.
cudaError_t retro_page_plan(const RetroPagePlanArgs& args, cudaStream_t stream);
cudaError_t retro_merge(const RetroMergeArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
