// ART decode attention on the GPU (attention/art_decode_args.h has the definition): the paged
// decode kernel's CTAs walk each list in its order, in blocks of four pages strided over every
// warp of the list's CTAs; each block leaves its 32-element probe state in the workspace, one
// warp of the list's first CTA merges those into the rounds' verdicts in order, and a warp
// starting a block of round r reads on only if no round up to r - lag - 1 has stopped the
// list (waiting for those verdicts if need be, so the pages read never depend on timing). The
// warps' full states merge as in paged decode attention.
//
// Same name and arguments as the CPU reference, skim::cpu::art_decode_attention. No device
// code here: plain C++ includes it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/art_decode_args.h"

namespace skim::cuda {

// Bytes of workspace for these shapes (batch, heads, head_dim, max_pages_per_seq, round_pages,
// the device); zero-filled once after allocation, every call leaves its counters at zero.
size_t art_decode_workspace_size(const ArtDecodeArgs& args);

// The lag_rounds to run these shapes with (it depends on the split of the lists over CTAs,
// planned from attn.max_seq_len): the most rounds between a warp's consecutive blocks (the
// least the kernel accepts: below it a warp could wait on a round it has not finished) plus
// two, so the verdicts come while the warps read on. -1 when the shapes are unsupported.
int art_decode_lag(const ArtDecodeArgs& args);

// Device pointers in args (stats: device memory, or null); asynchronous on `stream`, captures
// into a CUDA graph. cudaErrorInvalidValue for unsupported shapes, a lag below the least the
// kernel accepts (art_decode_lag - 2) or a too small workspace.
cudaError_t art_decode_attention(const ArtDecodeArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
