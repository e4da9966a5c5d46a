#include "backend/cpu/token_page_plan.h"

#include <stdexcept>

namespace skim::cpu {

void token_page_plan(const TokenPagePlanArgs& a) {
  if (a.lists < 0 || a.lists_per_row <= 0 || a.page_size <= 0 || a.max_pages < 0 || a.max_tokens < 0)
    throw std::invalid_argument("token_page_plan: bad shapes");
  for (int i = 0; i < a.lists; ++i) {
    const int len = a.token_lens[i];
    if (len < 0 || len > a.max_tokens) throw std::invalid_argument("token_page_plan: token_len out of range");
    const int32_t* list = a.token_lists + size_t(i) * a.max_tokens;
    const int32_t* pages = a.page_table + size_t(i / a.lists_per_row) * a.max_pages;
    int32_t* plan = a.plan_table + size_t(i) * a.max_pages;
    int32_t* tokens = a.plan_tokens + size_t(i) * a.max_tokens;
    int n = 0;  // distinct pages so far
    for (int j = 0; j < len; ++j) {
      const int p = list[j];
      if (p < 0 || p >= a.max_pages * a.page_size || (j > 0 && p <= list[j - 1]))
        throw std::invalid_argument("token_page_plan: positions must be ascending and within the table");
      if (j == 0 || p / a.page_size != list[j - 1] / a.page_size) plan[n++] = pages[p / a.page_size];
      tokens[j] = (n - 1) * a.page_size + p % a.page_size;
    }
    a.plan_lens[i] = n * a.page_size;
  }
}

}  // namespace skim::cpu
