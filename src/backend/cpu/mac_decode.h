// MAC's decode stages on the CPU (contracts and layouts in attention/mac_decode_args.h): what
// the CPU policy `mac` runs around cpu::paged_decode_attention, and the references the CUDA
// kernels (same names and arguments) are tested against. Host pointers.
#pragma once

#include "attention/mac_decode_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on bad shapes, a seq_len out of range, a base list that is not
// a subsequence of its row's table in position order, or a band start off a page boundary.
void mac_page_plan(const MacPagePlanArgs& args);

void mac_merge_states(const MacMergeArgs& args);

// The GPU's match and merge-and-push over bf16 rings in host memory: the CUDA kernels' oracles
// (the CPU policy keeps its rings in MacReuse, fp32).
void mac_match(const MacMatchArgs& args);
void mac_merge_push(const MacMergePushArgs& args);

}  // namespace skim::cpu
