#include "backend/cpu/window_page_plan.h"

#include <stdexcept>

namespace skim::cpu {

void window_page_plan(const WindowPagePlanArgs& a) {
  if (a.batch < 0 || a.num_kv_heads <= 0 || a.page_size <= 0 || a.max_pages_per_seq <= 0 || a.sink < 0 ||
      a.window < 0)
    throw std::invalid_argument("window_page_plan: bad shapes or parameters");
  for (int b = 0; b < a.batch; ++b) {
    if (!a.rows.has(b)) continue;
    const int len = a.seq_lens[b];
    if (len < 0 || len > a.max_pages_per_seq * a.page_size)
      throw std::invalid_argument("window_page_plan: seq_len out of range");
    const WindowPages w = window_pages(len, a.page_size, a.sink, a.window);
    const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
    for (int h = 0; h < a.num_kv_heads; ++h) {
      const size_t list = size_t(b) * a.num_kv_heads + h;
      for (int i = 0; i < w.count(); ++i) {
        a.out_table[list * a.max_pages_per_seq + i] = table[a.recent_first ? w.page_recent_first(i) : w.page(i)];
        if (a.out_masks) a.out_masks[list * a.max_pages_per_seq + i] = ~0u;
      }
      a.out_lens[list] = w.m == 0 ? 0 : (w.count() - 1) * a.page_size + len - (w.m - 1) * a.page_size;
    }
  }
}

}  // namespace skim::cpu
