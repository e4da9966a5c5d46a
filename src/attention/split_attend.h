// Runs attend for a list of tasks, each the query heads [q_first, q_first+q_count) of one row
// and KV head over chosen key ranges, spread across threads. When there are fewer tasks than
// threads (decode of few sequences), long tasks are cut into chunks whose states are merged
// afterwards: flash-decoding on the CPU.
#pragma once

#include <vector>

#include "attention/attend.h"
#include "attention/policy.h"

namespace skim {

struct AttendTask {
  int row = 0, kv_head = 0, q_first = 0, q_count = 0;  // q_first: head index within the row
  std::vector<KeyRange> ranges;
};

// Writes batch.out (and lse, [num_rows][num_heads], when not null) for every task's heads.
void attend_tasks(const AttentionBatch& batch, const std::vector<AttendTask>& tasks,
                  float* lse = nullptr);

}  // namespace skim
