// Arguments of token_page_plan, shared by the CPU reference (skim::cpu::token_page_plan) and the
// CUDA kernel of the same name. A token plan (attention/token_plan.h: per list, ascending key
// positions) read through a page cache (KV beyond GPU memory, kv/page_cache_args.h), whose map
// takes page plans: each list's distinct pages become a page plan (host page ids in position order;
// its length in tokens, as page plans give it), and the list is rewritten onto that plan's
// pages, position p -> j x page_size + p % page_size, with j the index of p's page in the plan.
// The attention then reads the rewritten list through the map's slot table (one page list per
// list: PagedDecodeArgs::tables_per_kv_head). No CUDA types here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skim {

struct TokenPagePlanArgs {
  int lists = 0;          // list i is row i / lists_per_row's
  int lists_per_row = 1;  // a plan per (row, KV head): num_kv_heads
  int page_size = 16, max_pages = 0, max_tokens = 0;
  const int32_t* token_lists = nullptr;  // [lists][max_tokens] strictly ascending positions
  const int32_t* token_lens = nullptr;   // [lists]
  const int32_t* page_table = nullptr;   // [rows][max_pages] each row's pages in position order
  int32_t* plan_table = nullptr;         // out [lists][max_pages]: the distinct pages, in position order
  int32_t* plan_lens = nullptr;          // out [lists]: their count x page_size
  int32_t* plan_tokens = nullptr;        // out [lists][max_tokens]: the rewritten positions
};

}  // namespace skim
