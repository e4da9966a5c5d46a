// CSAttention's kernels on the CPU (attention/cs_kernel_args.h): the build, the streaming insert
// and the decode-time search the CPU policy `cs` runs, and the definitions a device
// implementation is tested against. Host pointers. cs_select's searches run one after another
// (the policy searches per (row, KV group) as it goes); `scratch` holds the per-key sums between
// calls (kept zero), sized to the largest context seen; one per thread.
#pragma once

#include <vector>

#include "attention/cs_kernel_args.h"

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

// The build of one subspace of a group's tables (CsBuildArgs); subspaces are independent (one
// task each). Throws std::invalid_argument on bad shapes or an empty prompt.
void cs_build(const CsBuildArgs& args);

}  // namespace skim::cpu
