// Token log-probabilities on the CPU (backend/token_logprobs_args.h): what the engine reports
// for tokens sampled on the host, and the reference the CUDA kernel (backend/cuda/
// token_logprobs.cuh, same name and arguments) is tested against. Log Z sums in double.
#pragma once

#include "backend/token_logprobs_args.h"

namespace skim::cpu {

// Host pointers. Throws std::invalid_argument on a token or top_n out of range.
void token_logprobs(const TokenLogprobsArgs& args);

}  // namespace skim::cpu
