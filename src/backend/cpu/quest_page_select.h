// Quest's page selection on the CPU (contract and layouts in attention/quest_page_select_args.h),
// for both element types: bf16, the specification of the CUDA kernel to come; fp32, what the
// CPU policy `quest` (QuestSelector) runs on the CPU cache. One definition for both, so
// Quest's choice exists once. Host pointers.
#pragma once

#include <vector>

#include "attention/quest_page_select_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on inconsistent shapes or a seq_len out of range.
void quest_page_select(const QuestPageSelectArgs& args);
void quest_page_select(const QuestPageSelectArgsF32& args);

// The pages query head hq of sequence b keeps, as indices into its page table, in descending
// bound order (the newest first): what quest_page_select ORs into the masks, in the order a
// traversal by bound (ART) follows. Does not write out_*.
std::vector<int> quest_head_pages(const QuestPageSelectArgsF32& args, int b, int hq);

}  // namespace skim::cpu
