// A decode batch's token plan: what a token-granular selection stage (CSAttention's top-K
// keys plus its recent window) writes and the backend's token decode kernel reads
// (attention/token_decode_args.h). A page plan (page_plan.h) would read whole pages: at cs's
// default keep=0.3 nearly every 16-token page holds a chosen key, so a plan of tokens is what
// reads only the chosen keys.
#pragma once

#include <cstdint>
#include <vector>

namespace skim {

struct TokenPlan {
  bool per_query_head = false;  // one list per query head; else per (row, KV head), for the group
  int max_tokens = 0;           // row stride of `table`
  std::vector<int32_t> table;   // [lists][max_tokens] key positions, strictly ascending
  std::vector<int32_t> lens;    // [lists]
  uint64_t metadata_bytes = 0;  // tables read to make the plan

  // Sizes the plan for `n` lists of at most `tokens` positions; the lists' slots are not cleared
  // (a list is read up to its length only).
  void reset(bool per_head, int n, int tokens) {
    per_query_head = per_head;
    max_tokens = tokens;
    table.resize(size_t(n) * size_t(tokens));
    lens.assign(size_t(n), 0);
    metadata_bytes = 0;
  }
  int lists() const { return int(lens.size()); }
  const int32_t* list(int i) const { return table.data() + size_t(i) * max_tokens; }
  int32_t* list(int i) { return table.data() + size_t(i) * max_tokens; }
};

}  // namespace skim
