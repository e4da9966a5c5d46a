#include "attention/dense.h"

#include "attention/split_attend.h"

namespace skim {

void DensePolicy::attend(const AttentionBatch& b) {
  std::vector<RowRanges> work(size_t(b.num_rows));
  uint64_t keys = 0;
  for (int r = 0; r < b.num_rows; ++r) {
    work[r].ranges = {KeyRange{0, b.positions[r] + 1}};
    keys += uint64_t(b.positions[r] + 1) * b.num_kv_heads;
  }
  attend_rows(b, work);
  stats_.keys_read += keys;
  if (b.decode) {
    stats_.decode_calls += 1;
    stats_.decode_keys_read += keys;
  }
}

}  // namespace skim
