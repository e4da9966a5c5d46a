// CPU reference of group page selection: the specification the CUDA kernels
// (backend/cuda/group_page_select.cuh, same name, same arguments) are tested against, and
// the same choice as the CPU policy `gbsa` (GroupBlockSelector) makes. Host pointers;
// args.workspace is not used. `scores`, when given, receives every page's bound
// [batch][num_kv_heads][max_pages_per_seq] (forced pages: +inf), for tests.
#pragma once

#include <vector>

#include "attention/group_page_select_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on inconsistent shapes or a seq_len out of range.
void group_page_select(const GroupPageSelectArgs& args, std::vector<float>* scores = nullptr);

}  // namespace skim::cpu
