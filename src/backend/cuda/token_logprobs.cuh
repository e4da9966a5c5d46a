// Token log-probabilities on the GPU (contract in backend/token_logprobs_args.h; CPU reference
// skim::cpu::token_logprobs, same name and arguments), so that a server sampling on the device
// reports `logprobs` with only the numbers coming back. One CTA per row: the max and the sum of
// exp (float, block-reduced) give log Z; each thread keeps the best top_n logits of its
// strided slice in order, and top_n block-wide rounds take the best head of all threads'
// lists. No host synchronisation; captures into a CUDA graph. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/token_logprobs_args.h"

namespace skim::cuda {

// Device pointers in args; asynchronous on `stream`. cudaErrorInvalidValue on bad shapes.
cudaError_t token_logprobs(const TokenLogprobsArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
