#include "backend/cpu/dense_page_plan.h"

#include <stdexcept>

namespace skim::cpu {

void dense_page_plan(const DensePagePlanArgs& a) {
  if (a.batch < 0 || a.num_kv_heads <= 0 || a.page_size <= 0 || a.max_pages_per_seq <= 0)
    throw std::invalid_argument("dense_page_plan: bad shapes");
  for (int b = 0; b < a.batch; ++b) {
    if (!a.rows.has(b)) continue;
    const int len = a.seq_lens[b];
    if (len < 0 || len > a.max_pages_per_seq * a.page_size)
      throw std::invalid_argument("dense_page_plan: seq_len out of range");
    const int m = (len + a.page_size - 1) / a.page_size;
    for (int h = 0; h < a.num_kv_heads; ++h) {
      const size_t list = size_t(b) * a.num_kv_heads + h;
      for (int p = 0; p < m; ++p) {
        a.out_table[list * a.max_pages_per_seq + p] = a.page_table[size_t(b) * a.max_pages_per_seq + p];
        if (a.out_masks) a.out_masks[list * a.max_pages_per_seq + p] = ~0u;
      }
      a.out_lens[list] = len;
    }
  }
}

}  // namespace skim::cpu
