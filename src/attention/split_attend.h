// Runs attend for every (row, KV head) of a batch over the key ranges a policy chose, split
// across threads. Long ranges are cut into chunks whose states are merged (flash-decoding on
// the CPU), so a single decoding sequence with one KV head still uses every core.
#pragma once

#include <vector>

#include "attention/attend.h"
#include "attention/policy.h"

namespace skim {

struct RowRanges {
  std::vector<KeyRange> ranges;  // the same for all KV heads of the row
};

// Writes batch.out; returns nothing else. Per-head ranges can come later by extending
// RowRanges; today every head of a row reads the same keys.
void attend_rows(const AttentionBatch& batch, const std::vector<RowRanges>& work);

}  // namespace skim
