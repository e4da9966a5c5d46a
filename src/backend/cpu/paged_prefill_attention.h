// CPU reference of paged prefill attention (attention/paged_prefill_args.h): every row is a
// decode query over its prefix, so it is the decode reference with one sequence per row.
#pragma once

#include "attention/paged_prefill_args.h"

namespace skim::cpu {

void paged_prefill_attention(const PagedPrefillArgs& args);

}  // namespace skim::cpu
