// Paged prefill attention on the GPU: the causal attention of a prefill chunk of one sequence
// over its paged cache (attention/paged_prefill_args.h), FlashAttention-2 style. A CTA takes 64
// or 128 rows, each a (token, query head) pair of one KV head (the heads of a GQA group share
// the CTA's copy of every K/V row), keeps their queries in shared memory, and streams the KV
// pages [0, last row's position] 64 keys per step through a cp.async double buffer; scores and
// P.V run on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate) with the output
// and the online softmax state in registers. Steps past the tile's first position apply the
// causal mask; steps past its last are never visited.
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
// Few rows over a long prefix would leave most SMs idle (one CTA per row tile and KV head),
// so with a workspace the key range is split over several CTAs per row tile, each writing a
// partial (o, lse) that the decode path's merge kernel combines exactly.
cudaError_t paged_prefill_attention(const PagedPrefillArgs& args, cudaStream_t stream);

// The same with the tile chosen: m_tiles 16-row MMA tiles per warp (1: 64 rows per CTA, 2: 128
// rows, the default: each K/V fragment feeds two row tiles). For benchmarks and tests.
constexpr int kDefaultPrefillMTiles = 2;
cudaError_t paged_prefill_attention_tiles(const PagedPrefillArgs& args, int m_tiles, cudaStream_t stream);

// Workspace bytes any call with at most max_rows rows and positions <= max_position may use.
size_t paged_prefill_workspace_size(int max_rows, int num_heads, int num_kv_heads, int head_dim, int max_position);

}  // namespace skim::cuda
