// A decode batch's page plan (DESIGN.md section 3a): what a page-granular selection stage
// writes and the backend's paged decode kernel reads, in PagedDecodeArgs' layout. Per row
// (one list shared by its KV heads: dense) or per (row, KV head) (a selection each GQA group
// makes: ReSA's), the pages to attend in position order and the tokens they hold, every
// listed page full but the last. The same layout on both backends: cpu::group_page_select
// and cuda::group_page_select write it, cpu:: and cuda::paged_decode_attention read it.
#pragma once

#include <cstdint>
#include <vector>

namespace skim {

struct PagePlan {
  bool per_kv_head = false;
  int max_pages = 0;            // row stride of `table`
  std::vector<int32_t> table;   // [lists][max_pages] page ids
  std::vector<int32_t> lens;    // [lists] tokens in the listed pages
  uint64_t metadata_bytes = 0;  // digests read to make the plan

  int lists() const { return int(lens.size()); }
  const int32_t* list(int i) const { return table.data() + size_t(i) * max_pages; }
};

}  // namespace skim
