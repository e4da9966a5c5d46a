// cpu::token_page_plan (attention/token_page_plan_args.h: a token plan rewritten onto per-list
// page plans, for KV beyond GPU memory) against its definition on random token plans over
// shuffled pages: each plan holds the list's distinct pages in position order, each rewritten
// position lands on the same host page and row, the lengths count the pages; and token decode
// attention through the plans (per-KV-head tables) equals it through the sequences' own tables,
// bit for bit. Bad lists are refused.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "backend/cpu/token_decode_attention.h"
#include "backend/cpu/token_page_plan.h"
#include "../token_page_plan_case.h"

namespace skim {
namespace {

TEST(TokenPagePlan, RewritesEachListOntoItsDistinctPages) {
  for (const std::vector<int>& lens : {std::vector<int>{1, 300, 57, 700}, std::vector<int>{2000, 16, 17}}) {
    const test::TokenCase c = test::make_token_case(false, lens);
    test::TokenPagePlanCase plan;
    cpu::token_page_plan(plan.args(c));
    const int ps = c.ps, max_pages = c.t.attn.max_pages_per_seq;
    for (int i = 0; i < c.t.lists(); ++i) {
      const int b = i / c.hkv, len = c.list_lens[size_t(i)];
      const int32_t* list = c.lists.data() + size_t(i) * c.t.max_tokens;
      const int32_t* tokens = plan.plan_tokens.data() + size_t(i) * c.t.max_tokens;
      const int32_t* pages = plan.plan_table.data() + size_t(i) * max_pages;
      std::vector<int32_t> want_pages;  // the distinct pages, in position order
      for (int j = 0; j < len; ++j)
        if (j == 0 || list[j] / ps != list[j - 1] / ps)
          want_pages.push_back(c.table[size_t(b) * max_pages + list[j] / ps]);
      ASSERT_EQ(plan.plan_lens[size_t(i)], int(want_pages.size()) * ps) << "list " << i;
      EXPECT_EQ(std::vector<int32_t>(pages, pages + want_pages.size()), want_pages) << "list " << i;
      for (int j = 0; j < len; ++j) {
        ASSERT_EQ(pages[tokens[j] / ps], c.table[size_t(b) * max_pages + list[j] / ps]) << "list " << i << ", key " << j;
        ASSERT_EQ(tokens[j] % ps, list[j] % ps);
        if (j > 0) {
          ASSERT_GT(tokens[j], tokens[j - 1]);
        }
      }
    }
  }
}

TEST(TokenPagePlan, AttentionThroughThePlansEqualsThroughTheSequencesTables) {
  test::TokenCase c = test::make_token_case(false, {1, 300, 57, 700, 2000}, 64, 2, 4);
  test::TokenPagePlanCase plan;
  cpu::token_page_plan(plan.args(c));
  const size_t heads = size_t(c.t.attn.batch) * c.heads();
  std::vector<float> want_o(c.q.size()), want_lse(heads), got_o(c.q.size()), got_lse(heads);
  TokenDecodeArgs direct = c.t, through = plan.attention(c);
  direct.attn.o = want_o.data();
  direct.attn.lse = want_lse.data();
  through.attn.o = got_o.data();
  through.attn.lse = got_lse.data();
  cpu::token_decode_attention(direct);
  cpu::token_decode_attention(through);
  EXPECT_EQ(got_o, want_o);
  EXPECT_EQ(got_lse, want_lse);
}

TEST(TokenPagePlan, RefusesListsThatAreNotAscendingOrLeaveTheTable) {
  test::TokenCase c = test::make_token_case(false, {300});
  c.list_lens[0] = 3;
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{5, 5, 6}, std::vector<int32_t>{7, 3, 9},
                                          std::vector<int32_t>{-1, 2, 3}, std::vector<int32_t>{1, 2, 1 << 20}}) {
    std::copy(bad.begin(), bad.end(), c.lists.begin());
    test::TokenPagePlanCase plan;
    EXPECT_THROW(cpu::token_page_plan(plan.args(c)), std::invalid_argument);
  }
}

}  // namespace
}  // namespace skim
