// The dense page plan on the CPU (attention/dense_page_plan_args.h): the reference the CUDA
// kernel (backend/cuda/dense_page_plan.cuh, same name and arguments) is tested against.
#pragma once

#include "attention/dense_page_plan_args.h"

namespace skim::cpu {

// Host pointers. Throws std::invalid_argument on bad shapes or a seq_len out of range.
void dense_page_plan(const DensePagePlanArgs& args);

}  // namespace skim::cpu
