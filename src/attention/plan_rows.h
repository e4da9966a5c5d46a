// Which rows of a decode batch a selection kernel plans. A batch may mix policies (each
// sequence its own, DESIGN.md 3a): every row names its policy by a small index, and a kernel
// plans the rows whose index is in its mask, leaving the others' lists to their own policy's
// kernel. Plans are data: the same launch serves any mix.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace skim {

struct PlanRows {
  const int32_t* row_policy = nullptr;  // [batch] each row's policy index (< 32); null: every row
  uint32_t policy_mask = ~0u;           // bit i: rows of policy i are planned here

  SKIM_HOST_DEVICE bool has(int row) const {
    return row_policy == nullptr || (policy_mask >> (uint32_t(row_policy[row]) & 31u) & 1u) != 0u;
  }
};

}  // namespace skim
