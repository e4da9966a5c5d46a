// A plan mixing policies on the CPU: each kernel plans the rows of its policy (PlanRows) into
// one set of buffers, and every row's lists, masks and lengths are those its own kernel writes
// over the whole batch; dense rows are their page tables, streaming rows their sink and
// window pages; a selection without per-head masks marks its pages for every head. The CUDA kernels are held to the same composition
// (tests/cuda/mixed_plan_test.cpp).
#include <gtest/gtest.h>

#include "../mixed_plan_case.h"
#include "backend/cpu/group_page_select.h"
#include "backend/cpu/window_page_plan.h"
#include "backend/cpu/quest_page_select.h"

namespace skim {
namespace {

using test::MixedPlanCase;

struct Plan {
  std::vector<int32_t> table, lens;
  std::vector<uint32_t> masks;
  explicit Plan(const MixedPlanCase& c) : table(c.slots(), -7), lens(c.lists(), -7), masks(c.slots(), 0xdeadbeefu) {}
};

template <class Args>
void point(const MixedPlanCase& c, Args& a, Plan& p) {
  a.page_table = c.pages.table.data();
  a.seq_lens = c.lens.data();
  a.out_table = p.table.data();
  a.out_lens = p.lens.data();
  a.out_masks = p.masks.data();
}

template <class Args>
void point_digests(const MixedPlanCase& c, Args& a, Plan& p) {
  point(c, a, p);
  a.q = c.q.data();
  a.kmin = c.kmin.data();
  a.kmax = c.kmax.data();
}

TEST(MixedPlan, EachRowIsPlannedByItsOwnPolicy) {
  for (int trial = 0; trial < 6; ++trial) {
    const MixedPlanCase c(trial % 2 ? 64 : 128, 2, 3,
                          {test::random_int(1, 900), test::random_int(1, 900), test::random_int(1, 3000), 17, 1, 2500});
    Plan mixed(c), dense(c), gbsa(c), quest(c), streaming(c);
    const PlanRows rows{c.row_policy.data(), 0};
    auto only = [&](int policy) { return PlanRows{rows.row_policy, 1u << policy}; };

    WindowPagePlanArgs d = c.dense();
    point(c, d, mixed);
    d.rows = only(MixedPlanCase::kDense);
    cpu::window_page_plan(d);
    WindowPagePlanArgs w = c.streaming();
    point(c, w, mixed);
    w.rows = only(MixedPlanCase::kStreaming);
    cpu::window_page_plan(w);
    GroupPageSelectArgs g = c.gbsa();
    point_digests(c, g, mixed);
    g.rows = only(MixedPlanCase::kGbsa);
    cpu::group_page_select(g);
    QuestPageSelectArgs q = c.quest();
    point_digests(c, q, mixed);
    q.rows = only(MixedPlanCase::kQuest);
    cpu::quest_page_select(q);

    // Each kernel alone over every row, without masks where it has none.
    WindowPagePlanArgs d_all = c.dense();
    point(c, d_all, dense);
    d_all.out_masks = nullptr;
    cpu::window_page_plan(d_all);
    WindowPagePlanArgs w_all = c.streaming();
    point(c, w_all, streaming);
    w_all.out_masks = nullptr;
    cpu::window_page_plan(w_all);
    GroupPageSelectArgs g_all = c.gbsa();
    point_digests(c, g_all, gbsa);
    g_all.out_masks = nullptr;
    cpu::group_page_select(g_all);
    QuestPageSelectArgs q_all = c.quest();
    point_digests(c, q_all, quest);
    cpu::quest_page_select(q_all);

    for (size_t b = 0; b < c.lens.size(); ++b) {
      const int m = (c.lens[b] + 15) / 16;
      for (int i = 0; i < m && c.row_policy[b] == MixedPlanCase::kDense; ++i)
        ASSERT_EQ(dense.table[b * c.kv_heads * c.pages.stride + i], c.pages.table[b * c.pages.stride + i]);
    }
    EXPECT_EQ(test::compare_rows(c, MixedPlanCase::kDense, mixed.table, mixed.masks, mixed.lens, dense.table,
                                 nullptr, dense.lens), "");
    EXPECT_EQ(test::compare_rows(c, MixedPlanCase::kStreaming, mixed.table, mixed.masks, mixed.lens, streaming.table,
                                 nullptr, streaming.lens), "");
    EXPECT_EQ(test::compare_rows(c, MixedPlanCase::kGbsa, mixed.table, mixed.masks, mixed.lens, gbsa.table,
                                 nullptr, gbsa.lens), "");
    EXPECT_EQ(test::compare_rows(c, MixedPlanCase::kQuest, mixed.table, mixed.masks, mixed.lens, quest.table,
                                 &quest.masks, quest.lens), "");
    for (size_t l = 0; l < c.lists(); ++l) EXPECT_NE(mixed.lens[l], -7) << "list " << l << " planned by no policy";
  }
}

TEST(MixedPlan, RowsOutsideTheMaskAreLeftAsTheyAre) {
  const MixedPlanCase c(64, 2, 4, {300, 40, 700});
  const std::vector<int32_t> none(c.lens.size(), 5);  // every row policy 5: no kernel plans it
  Plan p(c);
  WindowPagePlanArgs d = c.streaming();
  point(c, d, p);
  d.rows = {none.data(), 0xfu};
  cpu::window_page_plan(d);
  GroupPageSelectArgs g = c.gbsa();
  point_digests(c, g, p);
  g.rows = {none.data(), 0xfu};
  cpu::group_page_select(g);
  QuestPageSelectArgs q = c.quest();
  point_digests(c, q, p);
  q.rows = {none.data(), 0xfu};
  cpu::quest_page_select(q);
  const Plan untouched(c);
  EXPECT_EQ(p.table, untouched.table);
  EXPECT_EQ(p.lens, untouched.lens);
  EXPECT_EQ(p.masks, untouched.masks);
}

// The window plan in ART's visiting order: the same pages, the newest first, then the sinks,
// then the window newest first.
TEST(WindowPagePlan, RecentFirstIsTheVisitingOrder) {
  for (int trial = 0; trial < 20; ++trial) {
    const int ps = 16, len = test::random_int(1, 3000), sink = test::random_int(0, 40), window = test::random_int(0, 900);
    const test::ShuffledPages pages = test::shuffled_pages({len}, ps, 1, 1, test::rng());
    std::vector<int32_t> pos(size_t(pages.stride), -7), rec(size_t(pages.stride), -7);
    int32_t pos_len = -1, rec_len = -1;
    WindowPagePlanArgs a{.batch = 1, .num_kv_heads = 1, .page_size = ps, .max_pages_per_seq = pages.stride,
                         .sink = sink, .window = window, .page_table = pages.table.data(), .seq_lens = &len,
                         .out_table = pos.data(), .out_lens = &pos_len};
    cpu::window_page_plan(a);
    a.recent_first = true;
    a.out_table = rec.data();
    a.out_lens = &rec_len;
    cpu::window_page_plan(a);
    EXPECT_EQ(rec_len, pos_len);
    const WindowPages w = window_pages(len, ps, sink, window);
    std::vector<int32_t> want;
    want.push_back(pages.table[size_t(w.m - 1)]);
    for (int i = 0; i < w.sinks; ++i) want.push_back(pages.table[size_t(i)]);
    for (int i = w.m - 2; i >= w.first; --i) want.push_back(pages.table[size_t(i)]);
    EXPECT_EQ(std::vector<int32_t>(rec.begin(), rec.begin() + w.count()), want) << "len " << len;
    std::vector<int32_t> a_sorted(pos.begin(), pos.begin() + w.count()), b_sorted = want;
    std::sort(a_sorted.begin(), a_sorted.end());
    std::sort(b_sorted.begin(), b_sorted.end());
    EXPECT_EQ(a_sorted, b_sorted);
  }
}

}  // namespace
}  // namespace skim
