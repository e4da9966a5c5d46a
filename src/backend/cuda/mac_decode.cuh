// MAC-Attention's decode stages on the GPU (contracts and layouts in
// attention/mac_decode_args.h; CPU references skim::cpu::mac_page_plan, mac_match and
// mac_merge_push, same names and arguments). Around paged_decode_attention, inside the decode
// step's CUDA graph, nothing on the host: hit or miss is data (each head's band start).
//
//   mac_match:      one CTA per (row, query head): L2 distance of the pre-RoPE query to every
//                   ring entry, the nearest (ties: the newest), hit by the row's rule;
//   mac_page_plan:  an inverse map of the rows' pages, then one CTA per (row, KV head) writes
//                   the below / above lists in position order with a block-wide scan;
//   mac_merge_push: one CTA per (row, query head): reused prefix + below -> the state cached
//                   for the row, + above -> the output; the new ring entry; then each active
//                   row's ring advances.
// This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/mac_decode_args.h"

namespace skim::cuda {

// Device pointers in args; asynchronous on `stream`. Return cudaErrorInvalidValue for
// unsupported shapes (head_dim 64 or 128, groups of at most 32 heads) or a too small workspace.
cudaError_t mac_match(const MacMatchArgs& args, cudaStream_t stream);
size_t mac_page_plan_workspace_size(const MacPagePlanArgs& args);
cudaError_t mac_page_plan(const MacPagePlanArgs& args, cudaStream_t stream);
cudaError_t mac_merge_push(const MacMergePushArgs& args, cudaStream_t stream);
// lens[r] = mac_prefix_end(positions[r], band, page_size): the keys of a prompt row's prefix
// state (the rows of a prefill chunk that become ring entries).
cudaError_t mac_prefix_lens(const int32_t* positions, int n, int band, int page_size, int32_t* lens,
                            cudaStream_t stream);

}  // namespace skim::cuda
