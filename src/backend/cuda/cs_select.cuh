// CSAttention's decode search on the GPU (attention/cs_kernel_args.h: CsSelectArgs), the
// device form of skim::cpu::cs_select: the same arguments, with every pointer in device memory
// (tables: a device array of CsTablesView whose pointers are device pointers; stats: one
// device CsSelectStats added to atomically, or null).
//
// Four kernels, each spread over the GPU, none waiting on the host:
//   1. choose (a CTA per search and subspace): the query slice's norm, its cosine to each
//      centroid (a warp each), and the nearest list (or the back-off's nearest few), with the CPU's tie rule;
//   2. scatter (CTAs over each chosen list's entries): entry (key, score) writes its term
//      w (score - floor) into its list's row of a per-position table and sets the list's bit in
//      the key's mask (a list's keys are distinct: no two writes collide);
//   3. sum (CTAs over positions): a touched position adds its lists' terms in list order, which
//      is the CPU's order of additions, so the sums are the CPU's; it clears its mask; each CTA
//      packs its touched positions below the window (with their sums' sort keys) into its own
//      segment, in position order;
//   4. pick (a CTA per search): the segments back to back, then the n_pick largest sums by page
//      selection's radix select (page_select_common.cuh) over those alone (most positions are
//      untouched), walked in position order (ties to the smaller position); with by_score a
//      segmented radix sort then orders them by descending sum.
// The masks and counts are zero again after a call, so the workspace needs no clearing.
//
// Differences from the CPU: the cosines are fp32 sums in another order (a warp's lanes; the
// CPU's dot products run in SIMD lanes), so a near-tie of centroids may go the other way; the norm and the sums
// are computed as the CPU does. At most 32 lists per search (subspaces x back-off width). This header holds no device code.
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
// dividing head_dim into slices of at most 128 dims, at most 256 centroids, backoff_top >= 1,
// subspaces x min(centroids, backoff_top) <= 32.
// A search's context is clamped to max_context and its window_begin to [0, min(context,
// max_picks)]; candidates, when asked for, need candidate_stride >= max_context. Returns
// cudaErrorInvalidValue for unsupported shapes or a too small workspace, else the launch status.
cudaError_t cs_select(const CsSelectArgs& args, const CsSelectWorkspace& workspace, cudaStream_t stream);

}  // namespace skim::cuda
