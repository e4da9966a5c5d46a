// CSAttention's streaming insert on the GPU (attention/cs_kernel_args.h: CsInsertArgs), the
// device form of skim::cpu::cs_insert: a decode step's new key of each (sequence, KV group)
// offered to every centroid list of its tables. One CTA per insert, one thread per list (M x C
// of them): the key slice's score against the list's centroid (fp32, in slice order), rounded
// to fp16, offered to the list's heap with the CPU's code (attention/top_list_heap.h), so the
// lists equal the CPU's wherever the fp32 scores round to the same fp16 (summation order may
// differ in the last fp32 bit). The admit cache, when given, is read and kept up to date as on
// the CPU. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include "attention/cs_kernel_args.h"

namespace skim::cuda {

// args: a device array of `count` CsInsertArgs whose pointers are device pointers (each its own
// tables and key); all share the shapes of `shapes` (head_dim, subspaces, centroids,
// list_capacity, score_dot), which the host checks. Asynchronous on `stream`, allocates
// nothing, captures into a CUDA graph. Supported: slices of at most 128 dims, M x C at most
// 1024 lists. Returns cudaErrorInvalidValue for unsupported shapes, else the launch status.
cudaError_t cs_insert(const CsInsertArgs* args, int count, const CsInsertArgs& shapes, cudaStream_t stream);

}  // namespace skim::cuda
