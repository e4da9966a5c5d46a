// The dense page plan on the GPU (contract and layouts in attention/dense_page_plan_args.h;
// CPU reference skim::cpu::dense_page_plan, same name and arguments): one CTA per (KV head,
// row) copies the row's page table into the head's list. No host synchronisation; captures
// into a CUDA graph. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include "attention/dense_page_plan_args.h"

namespace skim::cuda {

// Device pointers in args; asynchronous on `stream`. cudaErrorInvalidValue on bad shapes.
cudaError_t dense_page_plan(const DensePagePlanArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
