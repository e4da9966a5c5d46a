// Where the GPU forward stages a pass's inputs: offsets in GpuForward::inputs_ (int32
// elements), copied from pinned memory in one transfer per pass. Private to the GPU forward's
// sources.
#pragma once

#include <cstddef>

namespace skim::cuda {

struct InputLayout {
  size_t tokens, positions, seq_lens, rows, policy, mac_slot, table;  // [max_rows] each, then the table
  explicit InputLayout(int max_rows)
      : tokens(0), positions(size_t(max_rows)), seq_lens(2 * size_t(max_rows)),
        rows(3 * size_t(max_rows)), policy(4 * size_t(max_rows)), mac_slot(5 * size_t(max_rows)),
        table(6 * size_t(max_rows)) {}
};

}  // namespace skim::cuda
