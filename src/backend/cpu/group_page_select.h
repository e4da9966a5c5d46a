// Group page selection on the CPU, for both element types of GroupPageSelectArgsOf:
//  - bf16 (GroupPageSelectArgs): the specification the CUDA kernels
//    (backend/cuda/group_page_select.cuh, same name, same arguments) are tested against;
//  - fp32 (GroupPageSelectArgsF32): what the CPU policy `gbsa` (GroupBlockSelector) runs on
//    the CPU cache. One definition serves both, so ReSA's selection exists once per backend.
// Host pointers; args.workspace is not used. `scores`, when given, receives every page's
// bound [batch][num_kv_heads][max_pages_per_seq] (forced pages: +inf), for tests.
#pragma once

#include <vector>

#include "attention/group_page_select_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on inconsistent shapes or a seq_len out of range.
void group_page_select(const GroupPageSelectArgs& args, std::vector<float>* scores = nullptr);
void group_page_select(const GroupPageSelectArgsF32& args, std::vector<float>* scores = nullptr);

// The kept pages of sequence b, KV head h, as indices into its page table, in descending
// bound order (the forced recent pages first): the choice group_page_select writes out in
// position order, in the order a traversal by bound (ART) follows. Does not write out_*.
std::vector<int> group_pages_by_bound(const GroupPageSelectArgsF32& args, int b, int h);

}  // namespace skim::cpu
