// CSAttention's decode-time selection on the CPU (attention/cs_select_args.h): the kernel the
// CPU policy `cs` runs for each search, and the definition a device implementation is tested
// against. Host pointers; searches run one after another (the policy searches per (row, KV
// group) as it goes). `scratch` holds the per-key sums between calls (kept zero), sized to the
// largest context seen; one per thread.
#pragma once

#include <vector>

#include "attention/cs_select_args.h"

namespace skim::cpu {

struct CsSelectScratch {
  std::vector<float> sums, slice, cos, touched_sums;
  std::vector<uint8_t> touched;
  std::vector<int32_t> touched_keys;
  std::vector<int> order;
};

// Throws std::invalid_argument on bad shapes (head_dim not divisible by subspaces, a
// window_begin past its context or past max_picks).
void cs_select(const CsSelectArgs& args, CsSelectScratch& scratch);

// CSAttention's streaming insert of one key (CsInsertArgs). Throws std::invalid_argument on bad
// shapes.
void cs_insert(const CsInsertArgs& args);

}  // namespace skim::cpu
