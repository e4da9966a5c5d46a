// Runs attend for a list of tasks, each the query heads [q_first, q_first+q_count) of one row
// and KV head over chosen key ranges, spread across threads. When there are fewer tasks than
// threads (decode of few sequences), long tasks are cut into chunks whose states are merged
// afterwards: flash-decoding on the CPU.
#pragma once

#include <vector>

#include "backend/cpu/attend.h"
#include "kv/kv_layer_view.h"
#include "kv/page_pool.h"

namespace skim {

// What the calls below read and write: the rows' queries and outputs, the layer's cache, and
// each row's page table (the pages a task's positions index, unless the task names its own).
struct AttendRows {
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;  // multiplies q.k
  KVLayerView kv;
  const PageTable* const* tables = nullptr;  // [rows]
  const float* q = nullptr;  // [rows][num_heads][head_dim]
  float* out = nullptr;      // [rows][num_heads][head_dim]
};

struct AttendTask {
  int row = 0, kv_head = 0, q_first = 0, q_count = 0;  // q_first: head index within the row
  std::vector<KeyRange> ranges;
  // The page list the ranges' positions index (a page plan's list); null: the row's table.
  const int32_t* pages = nullptr;
};

// Writes rows.out (and lse, [rows][num_heads], when not null) for every task's heads.
void attend_tasks(const AttendRows& rows, const std::vector<AttendTask>& tasks, float* lse = nullptr);

// The key ranges (disjoint, sorted) of one query head of one row.
struct HeadKeys {
  int row = 0, head = 0;
  std::vector<KeyRange> ranges;
  // The page list the ranges' positions index (a page plan's list, the same for the entries of
  // one (row, KV head)); null: the row's table.
  const int32_t* pages = nullptr;
};

// The state of each entry over its ranges: o [entries][head_dim], lse [entries]. Entries of the
// same (row, KV head) may list different ranges (MAC's per-head bands, a per-head selection)
// yet read each key once for all the entries that hold it, as a GQA kernel loads it: the keys
// are cut where the set of entries holding them changes and each part is attended by that set
// at once. Parts are cut further to keep every thread busy.
void attend_shared_keys(const AttendRows& rows, const std::vector<HeadKeys>& entries, float* o, float* lse);

}  // namespace skim
