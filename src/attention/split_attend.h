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

// The key ranges (disjoint, sorted) of one query head of one row.
struct HeadKeys {
  int row = 0, head = 0;
  std::vector<KeyRange> ranges;
};

// The state of each entry over its ranges: o [entries][head_dim], lse [entries]. Entries of the
// same (row, KV head) may list different ranges (MAC's per-head bands, a per-head selection)
// yet read each key once for all the entries that hold it, as a GQA kernel loads it: the keys
// are cut where the set of entries holding them changes and each part is attended by that set
// at once. Parts are cut further to keep every thread busy.
void attend_shared_keys(const AttentionBatch& batch, const std::vector<HeadKeys>& entries, float* o, float* lse);

}  // namespace skim
