// Paged prefill attention on the GPU: the causal attention of a prefill chunk of one sequence
// (or of several: paged_prefill_args.h) over its paged cache, FlashAttention style. A CTA takes
// 64 or 128 rows, each a (token, query head) pair of one KV head (the heads of a GQA group share
// the CTA's copy of every K/V row), keeps their queries in shared memory, and streams the KV
// pages [0, last row's position] through a cp.async double buffer; scores and P.V run on the
// tensor cores (bf16 in, fp32 accumulate) with the output and the online softmax state in
// registers: on Hopper with wgmma (two warpgroups of 64 rows, 128 keys per step), elsewhere with
// mma.sync m16n8k16 (64 keys per step). Steps past the tile's first position apply the causal
// mask; steps past its last are never visited.
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

// The kernels, for benchmarks and tests: FlashAttention-2's loop on mma.sync with 64 rows per
// CTA (16 per warp) or 128 (32 per warp: each K/V fragment feeds two row tiles), and the Hopper
// form on wgmma (two warpgroups of 64 rows, 128 keys per step; sm_90a builds on Hopper only).
// kWgmmaWs: the same MMAs, warp-specialised (a producer warpgroup loads three K/V stages for
// two consumer warpgroups); kWgmmaPingpong: that with FlashAttention-3's ping-pong schedule of the
// consumers (FlashAttention-3's intra-warpgroup overlap was 14-20% slower still on an H200 and is
// gone: bench/results/2026-11-27-h200-pending/).
// paged_prefill_attention runs the default: kWgmmaWs where wgmma is available (on the H100 5-8%
// faster than kWgmma at 8K-128K, 386 TFLOP/s at 128K; ping-pong 3-6% slower than kWgmma:
// bench/results/2026-11-26-h100-pending/), else kMma128.
enum class PrefillKernel { kMma64 = 0, kMma128 = 1, kWgmma = 2, kWgmmaWs = 3, kWgmmaPingpong = 4 };
bool prefill_kernel_available(PrefillKernel kind);
PrefillKernel default_prefill_kernel();
cudaError_t paged_prefill_attention_with(const PagedPrefillArgs& args, PrefillKernel kind, cudaStream_t stream);

// Workspace bytes any call with at most max_rows rows and positions <= max_position may use.
size_t paged_prefill_workspace_size(int max_rows, int num_heads, int num_kv_heads, int head_dim, int max_position);

}  // namespace skim::cuda
