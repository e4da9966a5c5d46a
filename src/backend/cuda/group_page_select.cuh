// Group page selection on the GPU (contract and layouts in attention/group_page_select_args.h;
// CPU reference skim::cpu::group_page_select, same name and arguments).
//
// Two kernels. score: many CTAs stream the digests of every (sequence, KV head, page), one
// warp per page, and write an order-preserving 32-bit key per page (the bound's float bits
// made monotone; forced pages above every bound, the newest page highest). select: one CTA
// per (sequence, KV head) finds the n-th largest key by a 4-pass radix select over the keys
// (8 bits a pass, histograms in shared memory), then writes the kept page ids in position
// order with a block-wide scan (ties at the threshold go to the lower page index, as on the
// CPU). With by_score, the kept pages' keys go beside them and CUB's segmented radix sort
// (stable, descending) puts each list in bound order, the newest page first. No host
// synchronisation; captures into a CUDA graph. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/group_page_select_args.h"

namespace skim::cuda {

// Bytes of workspace (one key per (sequence, KV head, page slot); with by_score the sort's
// buffers and scratch too); no zero-filling needed.
size_t group_page_select_workspace_size(const GroupPageSelectArgs& args);

// Device pointers in args; asynchronous on `stream`. Supported: head_dim 64 or 128. Returns
// cudaErrorInvalidValue for unsupported shapes or parameters or a too small workspace.
cudaError_t group_page_select(const GroupPageSelectArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
