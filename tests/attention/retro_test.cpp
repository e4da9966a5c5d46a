// RetroAttention's retrospective mask (Algorithm 2 of seeds/000) against a brute-force set
// difference of the paper's equation (7): a past query of step u, at step t, reads the pages of
// S_t that no query of steps u..t-1 loaded (restricted to its causal keys).
#include "attention/retro_mask.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "../test_random.h"

namespace skim {
namespace {

// Keys of `pages` visible to a query at `pos` (page size 16).
std::set<int> causal_keys(const std::set<int>& pages, int pos) {
  std::set<int> k;
  for (int p : pages)
    for (int t = p * 16; t < p * 16 + 16 && t <= pos; ++t) k.insert(t);
  return k;
}

TEST(RetroMask, MatchesEquation7) {
  for (int trial = 0; trial < 20; ++trial) {
    const int w = test::random_int(2, 9), steps = 80, pos0 = test::random_int(64, 400);
    const int budget = test::random_int(1, 8);
    RetroMask mask;
    std::vector<std::set<int>> S;  // selections by step
    for (int t = 0; t < steps; ++t) {
      const int pos = pos0 + t, current = pos / 16, num_pages = current + 1;
      // A Quest-like selection: the current page forced, then random pages, in random order.
      std::vector<int> sel = {current};
      while (int(sel.size()) < std::min(budget, num_pages)) {
        int p = test::random_int(0, num_pages - 1);
        if (std::find(sel.begin(), sel.end(), p) == sel.end()) sel.push_back(p);
      }
      std::shuffle(sel.begin(), sel.end(), test::rng());
      std::vector<int32_t> values;
      mask.update(t, current, sel, values);
      ASSERT_EQ(values.size(), sel.size());
      S.push_back(std::set<int>(sel.begin(), sel.end()));
      for (int u = std::max(0, t - w + 1); u < t; ++u) {
        std::set<int> by_mask, brute;
        for (size_t i = 0; i < sel.size(); ++i)
          if (values[i] < u) by_mask.insert(sel[i]);
        brute = S[size_t(t)];
        for (int m = u; m < t; ++m)
          for (int p : S[size_t(m)]) brute.erase(p);
        const int pos_u = pos0 + u;
        EXPECT_EQ(causal_keys(by_mask, pos_u), causal_keys(brute, pos_u)) << "trial " << trial << " t " << t << " u " << u;
        // The current page is never offered to a past query.
        EXPECT_FALSE(by_mask.count(current));
      }
    }
  }
}

TEST(RetroMask, CurrentPageRuleAndValues) {
  RetroMask m;
  std::vector<int32_t> v;
  m.update(0, 3, std::vector<int>{3, 1}, v);
  EXPECT_EQ(v, (std::vector<int32_t>{-1, RetroMask::kNever}));  // page 3 set to t-1 = -1 first
  m.update(1, 3, std::vector<int>{2, 3}, v);
  EXPECT_EQ(v, (std::vector<int32_t>{RetroMask::kNever, 0}));
  EXPECT_EQ(m.value(1), 0);
  EXPECT_EQ(m.value(2), 1);
  EXPECT_EQ(m.value(3), 1);
  EXPECT_EQ(m.value(100), RetroMask::kNever);
}

}  // namespace
}  // namespace skim
