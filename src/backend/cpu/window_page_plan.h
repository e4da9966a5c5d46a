// The window page plan on the CPU (attention/window_page_plan_args.h): what the CPU policies
// `dense` and `streaming` plan with, and the reference the CUDA kernel (backend/cuda/
// window_page_plan.cuh, same name and arguments) is tested against.
#pragma once

#include "attention/window_page_plan_args.h"

namespace skim::cpu {

// Host pointers. Throws std::invalid_argument on bad shapes or a seq_len out of range.
void window_page_plan(const WindowPagePlanArgs& args);

}  // namespace skim::cpu
