// A token decode case (token_decode_case.h) rewritten onto per-list page plans
// (attention/token_page_plan_args.h), for the CPU and CUDA tests of token_page_plan and of token
// decode attention through per-KV-head tables: the plan's outputs, and the case's attention
// arguments reading them (each list's plan as its KV head's table, the plan's lengths as the
// tables' lengths; the pools unchanged: the plans hold the same host page ids).
#pragma once

#include <vector>

#include "attention/token_page_plan_args.h"
#include "token_decode_case.h"

namespace skim::test {

struct TokenPagePlanCase {
  std::vector<int32_t> plan_table, plan_lens, plan_tokens;

  // The arguments over `c` (lists shared by each GQA group) writing into this case's buffers.
  TokenPagePlanArgs args(const TokenCase& c) {
    const TokenDecodeArgs& t = c.t;
    plan_table.assign(size_t(t.lists()) * t.attn.max_pages_per_seq, -1);
    plan_lens.assign(size_t(t.lists()), -1);
    plan_tokens.assign(size_t(t.lists()) * t.max_tokens, -1);
    return {.lists = t.lists(), .lists_per_row = c.hkv, .page_size = c.ps, .max_pages = t.attn.max_pages_per_seq,
            .max_tokens = t.max_tokens, .token_lists = c.lists.data(), .token_lens = c.list_lens.data(),
            .page_table = c.table.data(), .plan_table = plan_table.data(), .plan_lens = plan_lens.data(),
            .plan_tokens = plan_tokens.data()};
  }
  // c's attention over the plans (after token_page_plan has filled them).
  TokenDecodeArgs attention(const TokenCase& c) const {
    TokenDecodeArgs t = c.t;
    t.attn.tables_per_kv_head = true;
    t.attn.page_table = plan_table.data();
    t.attn.seq_lens = plan_lens.data();
    t.token_lists = plan_tokens.data();
    return t;
  }
};

}  // namespace skim::test
