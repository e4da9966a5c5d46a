// Token decode attention on the GPU: decode attention over a token plan, the keys a
// token-granular selection chose (CSAttention's top-K plus its window; attention/
// token_decode_args.h), gathered row by row through each sequence's page table.
//
// Split-KV flash decoding over the list: several CTAs share one list, each a contiguous chunk
// of it, and each CTA handles every query head that reads the list (the GQA group of a shared
// list, one head of a per-query-head list), so a chosen K/V row is read from HBM once per
// call. A warp takes a tile of 16 tokens at a time: it issues all their K and V loads (each
// lane 8 bytes of a row: one 256-byte row per warp load at head_dim 128) while the next tile's
// positions and page ids load, scores the 16 tokens per head with one transposed warp sum
// (16 shuffles for 16 tokens), and keeps an online softmax per head; the CTA merges its warps
// and writes one partial state per head, merged across chunks by a second small kernel (the exact
// log-sum-exp rule of attention/attention_state.h). With one chunk it writes the result
// directly. The split is static: results are bitwise reproducible.
//
// Same name and arguments as the CPU reference, skim::cpu::token_decode_attention. This
// header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/token_decode_args.h"

namespace skim::cuda {

// Bytes of workspace a call with these shapes needs (the partial states): depends on the
// batch, heads, head_dim, max_tokens, the list form and the device's SM count, not on the
// lists, so one allocation serves every step of a shape. Zero when one chunk per list does.
size_t token_decode_workspace_size(const TokenDecodeArgs& args);

// Device pointers in args (attn.workspace: at least token_decode_workspace_size bytes; no
// zero-fill needed); asynchronous on `stream`, allocates nothing, captures into a CUDA graph
// (the split is planned on the host from max_tokens). Supported: head_dim 64 or 128, at most
// 8 query heads per list, the default pool layout or explicit strides. Lists must hold
// strictly ascending positions below their sequence's length (not checked on the device).
// Returns cudaErrorInvalidValue for unsupported shapes or a too small workspace, else the
// launch status.
cudaError_t token_decode_attention(const TokenDecodeArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
