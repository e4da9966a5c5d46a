// token_page_plan on the CPU (attention/token_page_plan_args.h): the reference the CUDA kernel
// of the same name is tested against. Host pointers. Throws std::invalid_argument on bad shapes
// or a list that is not strictly ascending within [0, max_pages x page_size).
#pragma once

#include "attention/token_page_plan_args.h"

namespace skim::cpu {

void token_page_plan(const TokenPagePlanArgs& args);

}  // namespace skim::cpu
