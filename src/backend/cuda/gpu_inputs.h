// Where the GPU forward stages a pass's inputs: offsets in GpuForward::inputs_ (int32
// elements), copied from pinned memory in one transfer per pass. Private to the GPU forward's
// sources.
#pragma once

#include <cstddef>

namespace skim::cuda {

// policy: each row's policy index; plan_policy: the index its base plans it under (a
// RetroAttention past row: none, kNoPlan); retro_step, newest_row, retro_slot: RetroAttention's
// (attention/retro_decode_args.h; retro_slot -1 for other rows); seq_rows: where each run of
// rows of one sequence starts, and n (PagedPrefillArgs::seq_rows), R + 1 entries.
struct InputLayout {
  static constexpr int32_t kNoPlan = 31;  // no planner holds it
  size_t tokens, positions, seq_lens, rows, policy, mac_slot, plan_policy, retro_step, newest_row, retro_slot, cs_slot,
      seq_rows, table;
  explicit InputLayout(int max_rows) {
    size_t at = 0, R = size_t(max_rows);
    for (size_t* f : {&tokens, &positions, &seq_lens, &rows, &policy, &mac_slot, &plan_policy, &retro_step,
                      &newest_row, &retro_slot, &cs_slot, &seq_rows, &table}) {
      *f = at;
      at += f == &seq_rows ? R + 1 : R;
    }
  }
};

}  // namespace skim::cuda
