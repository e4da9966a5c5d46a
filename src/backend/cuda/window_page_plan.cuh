// The window page plan on the GPU (contract and layouts in attention/window_page_plan_args.h;
// CPU reference skim::cpu::window_page_plan, same name and arguments): one CTA per (KV head,
// row) copies the row's kept page ids (sinks and recent window; every page with no window)
// into the head's list. No host synchronisation; captures into a CUDA graph. This header
// holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include "attention/window_page_plan_args.h"

namespace skim::cuda {

// Device pointers in args; asynchronous on `stream`. cudaErrorInvalidValue on bad shapes.
cudaError_t window_page_plan(const WindowPagePlanArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
