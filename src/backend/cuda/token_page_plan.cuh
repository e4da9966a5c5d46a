// token_page_plan on the GPU (attention/token_page_plan_args.h): a token plan rewritten onto
// per-list page plans, so that a page cache can map them (KV beyond GPU memory). A CTA per list
// walks it in tiles of consecutive positions: a position opens a page when its page differs from
// the previous position's, a block scan numbers the opened pages, and each position is rewritten
// onto its page's number. Same name and arguments as the CPU reference,
// skim::cpu::token_page_plan. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include "attention/token_page_plan_args.h"

namespace skim::cuda {

// Device pointers in args; asynchronous on `stream`, allocates nothing, captures into a CUDA
// graph. Lists must be strictly ascending within the table (not checked on the device).
// Returns cudaErrorInvalidValue for bad shapes, else the launch status.
cudaError_t token_page_plan(const TokenPagePlanArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
