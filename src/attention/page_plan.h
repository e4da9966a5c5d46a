// A decode batch's page plan (DESIGN.md section 3a): what a page-granular selection stage
// writes and the backend's paged decode kernel reads, in PagedDecodeArgs' layout. Per row
// (one list shared by its KV heads: dense) or per (row, KV head) (a selection each GQA group
// makes: ReSA's), the pages to attend in position order and the tokens they hold, every
// listed page full but the last. A selection per query head (Quest's) lists its group's
// union once per (row, KV head) with a per-head page mask (PagedDecodeArgs::head_masks). The
// same layout on both backends: cpu::group_page_select and cuda::group_page_select write it,
// cpu:: and cuda::paged_decode_attention read it.
#pragma once

#include <cstdint>
#include <vector>

namespace skim {

struct PagePlan {
  bool per_kv_head = false;
  int max_pages = 0;            // row stride of `table`
  std::vector<int32_t> table;   // [lists][max_pages] page ids
  std::vector<int32_t> lens;    // [lists] tokens in the listed pages
  std::vector<uint32_t> head_masks;  // [lists][max_pages] bit g: query head g of the group
                                     // attends the page; empty: every head every page
  uint64_t metadata_bytes = 0;  // digests read to make the plan

  // Empties the plan for `n` lists of at most `pages` pages each; masks are dropped (a
  // masked planner sizes them after).
  void reset(bool per_head, int n, int pages) {
    per_kv_head = per_head;
    max_pages = pages;
    table.assign(size_t(n) * pages, 0);
    lens.assign(size_t(n), 0);
    head_masks.clear();
    metadata_bytes = 0;
  }
  int lists() const { return int(lens.size()); }
  const int32_t* list(int i) const { return table.data() + size_t(i) * max_pages; }
};

}  // namespace skim
