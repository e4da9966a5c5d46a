// Paged prefill attention on the GPU: the causal attention of a prefill chunk of one sequence
// over its paged cache (attention/paged_prefill_args.h), flash-attention style. A CTA takes a
// tile of 16 consecutive rows and one KV head, with one warp per query head of the group (up
// to 8; larger groups use several CTAs), streams the KV pages [0, last row's position] once,
// four pages per step, through shared memory for the whole tile, and keeps an online softmax per row: scores and
// P.V on the tensor cores (WMMA, bf16 in, fp32 accumulate). Where the decode kernel reads a
// row's prefix once per row, this reads it once per 16 rows.
//
// Same name and arguments as the CPU reference, skim::cpu::paged_prefill_attention. No device
// code here.
#pragma once

#include <cuda_runtime_api.h>

#include "attention/paged_prefill_args.h"

namespace skim::cuda {

// head_dim 64 or 128, page_size 16. Asynchronous on `stream`, allocates nothing. Returns
// cudaErrorInvalidValue for unsupported shapes, else the launch status.
//
// Few rows over a long prefix would leave most SMs idle (one CTA per 16 rows and KV head),
// so with a workspace the key range is split over several CTAs per row tile, each writing a
// partial (o, lse) that the decode path's merge kernel combines exactly.
cudaError_t paged_prefill_attention(const PagedPrefillArgs& args, cudaStream_t stream);

// Workspace bytes any call with at most max_rows rows and positions <= max_position may use.
size_t paged_prefill_workspace_size(int max_rows, int num_heads, int num_kv_heads, int head_dim, int max_position);

}  // namespace skim::cuda
