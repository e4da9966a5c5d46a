// CSAttention's decode search on the GPU (attention/cs_kernel_args.h: CsSelectArgs), the
// device form of skim::cpu::cs_select: the same arguments, with every pointer in device memory
// (tables: a device array of CsTablesView whose pointers are device pointers; stats: one
// device CsSelectStats added to atomically, or null).
//
// One CTA per search. Per subspace, in order: the query slice's norm, its cosine to each
// centroid (a thread per centroid), the nearest (or the back-off's nearest few) chosen by one
// thread with the CPU's tie rule; then each chosen list in turn, its entries spread over the
// threads, added into a dense per-position sum. A list holds distinct keys and the lists are
// taken one after another (a barrier between), so every key's sum adds its terms in the CPU's
// order without atomics. The picks are the n_pick largest sums of the touched keys below the
// window: page selection's radix select (page_select_common.cuh) over the positions, keys of
// untouched positions below every touched one, walked in position order (ties to the smaller
// position); with by_score a segmented radix sort then orders them by descending sum. The CTA
// clears the sums and marks it wrote, so the workspace stays zero between calls.
//
// Differences from the CPU: the slice's norm and the cosines are fp32 sums in another order
// (the CPU's norm sums in double, its dot products in SIMD lanes), so a near-tie of centroids
// or of key sums may go the other way. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/cs_kernel_args.h"

namespace skim::cuda {

// The device scratch of cs_select, the CPU's CsSelectScratch: `bytes` at `data`, zero-filled
// once when allocated (cudaMemset); every call leaves it zero again. max_context bounds every
// search's context.
struct CsSelectWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
  int max_context = 0;
};

// Bytes of workspace for calls of these shapes (searches, subspaces, list_capacity,
// backoff_top, max_picks, by_score) with contexts up to max_context; 0 for unsupported shapes.
size_t cs_select_workspace_size(const CsSelectArgs& args, int max_context);

// Asynchronous on `stream`; allocates nothing; captures into a CUDA graph. Supported: subspaces
// dividing head_dim into slices of at most 128 dims, at most 256 centroids, backoff_top >= 1.
// A search's context is clamped to max_context and its window_begin to [0, min(context,
// max_picks)]; candidates, when asked for, need candidate_stride >= max_context. Returns
// cudaErrorInvalidValue for unsupported shapes or a too small workspace, else the launch status.
cudaError_t cs_select(const CsSelectArgs& args, const CsSelectWorkspace& workspace, cudaStream_t stream);

}  // namespace skim::cuda
