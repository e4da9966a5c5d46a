// CSAttention's table build on the GPU (attention/cs_kernel_args.h: CsBuildArgsOf), the
// device form of skim::cpu::cs_build for bf16 keys (CsBuildArgsBf16): per build (one
// subspace m of one (sequence, KV group)'s tables) the cosine k-means of slice m of the prompt
// vectors, then each centroid's list of its top-L keys and the list's tail.
//
// Five steps, batched over the builds of a call:
//   1. sample (a CTA per build): every ceil(n / max_points)-th vector's slice, normalised as the
//      CPU's normalize does (a double sum in order, then the float norm): the CPU's points;
//   2. k-means (a CTA per build): greedy k-means++ seeds (2 + ln k candidates drawn with
//      probability D^2, D the cosine distance to the nearest seed; the one leaving the least
//      total D^2 kept, the first of equal ones), then `iters` Lloyd iterations (nearest centroid
//      by dot product, the first of equal ones; normalised double means; an empty cluster keeps
//      its centroid), as cpu::cosine_kmeans; the draws come from a hash of (0x5eed0000 + m,
//      draw), not the CPU's mt19937, so the centroids are not the CPU's;
//   3. lists (a CTA per build and centroid): every key's score c . k_m (the slice normalised
//      when !score_dot), its sum for the tail, and the top min(L, num_keys) by page selection's
//      radix select (ties to the smaller position, as the CPU's);
//   4. a segmented radix sort of each list by ascending (fp16 score, then descending position):
//      the order TopList's heap ranks entries in, so the sorted list is a valid min-heap;
//   5. unpack: the sorted entries into list_index / list_score.
// Given the same centroids, the lists and tails are the CPU's up to fp32 summation order near
// ties. No host round trip; the call allocates nothing. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/cs_kernel_args.h"

namespace skim::cuda {

struct CsBuildWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Bytes of workspace for `count` builds of the shapes in `shapes` (head_dim, subspaces,
// centroids, max_points, list_capacity) with at most max_keys keys each; 0 when unsupported.
size_t cs_build_workspace_size(const CsBuildArgsBf16& shapes, int count, int max_keys);

// builds: a device array of `count` CsBuildArgsBf16 (device pointers inside; the shapes of
// `shapes`, each its own subspace, vectors, keys and outputs; num_keys <= max_keys, num_vectors
// >= 1). Supported: slices of at most 128 dims, at most 256 centroids, max_points <= 65536.
// Asynchronous on `stream`. Returns cudaErrorInvalidValue for unsupported shapes or a too small
// workspace, else the first launch error.
cudaError_t cs_build(const CsBuildArgsBf16* builds, int count, const CsBuildArgsBf16& shapes, int max_keys,
                     const CsBuildWorkspace& workspace, cudaStream_t stream);

}  // namespace skim::cuda
