// RetroAttention's decode stages on the GPU (contracts and layouts in
// attention/retro_decode_args.h; CPU references skim::cpu::retro_page_plan and retro_merge,
// same names and arguments). Around paged_decode_attention, inside the decode step's graph.
//
//   retro_page_plan: an inverse map of the rows' pages (once per step: index_ready); then one CTA
//     per (row not a past one, KV head): it copies its base list; a newest row in a sparse layer
//     updates its units' masks (the current page's old value t-1, each listed page's old value
//     recorded and A = t); then the same CTA lists, for each past row of its sequence, with a
//     block-wide scan, its pages whose old value is below the past row's step, per head.
//   retro_merge: one launch, every row (a rule's w entries keep the newest rows' entries apart
//     from their past rows'; the call requires rules): past rows merge their cached state with
//     the new one, newest rows cache theirs. Where the decode call splits its lists over CTAs,
//     paged_decode_attention's Retro form runs this merge inside the chunk merge's launch instead.
// This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/retro_decode_args.h"

namespace skim::cuda {

size_t retro_page_plan_workspace_size(const RetroPagePlanArgs& args);
// Device pointers in args; asynchronous on `stream`. cudaErrorInvalidValue for unsupported
// shapes (groups of at most 32 heads, head_dim 64 or 128 for the merge), a small workspace, or
// a merge of retro rows without rules.
cudaError_t retro_page_plan(const RetroPagePlanArgs& args, cudaStream_t stream);
cudaError_t retro_merge(const RetroMergeArgs& args, cudaStream_t stream);
// Whether retro_merge (and paged_decode_attention's Retro form) accepts these arguments.
bool retro_merge_supported(const RetroMergeArgs& args);

}  // namespace skim::cuda
