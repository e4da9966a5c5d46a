// RetroAttention's decode stages on the CPU (contracts and layouts in
// attention/retro_decode_args.h): what the CPU policy `+retro` runs around
// cpu::paged_decode_attention, and the references the CUDA kernels (same names and arguments)
// are tested against. Host pointers.
#pragma once

#include "attention/retro_decode_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on bad shapes, a seq_len out of range, or a slot's stride too
// short for its pages.
void retro_page_plan(const RetroPagePlanArgs& args);
// Throws std::invalid_argument when a past row's cached state is missing (its step's entry
// holds another step).
void retro_merge(const RetroMergeArgs& args);

}  // namespace skim::cpu
