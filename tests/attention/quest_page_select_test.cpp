// cpu::quest_page_select (the CPU policy `quest`'s choice, and the CUDA kernel's oracle to
// come) against its definition: per query head the bound recomputed in double from the
// digests, the n = max(1, ceil(budget tokens / 16)) best pages kept with the newest forced,
// every kept page scoring at least every dropped one; per KV head the union of its heads'
// pages in position order, each mask bit exactly that head's pages, the newest page last. The
// bf16 and fp32 forms choose the same pages on bf16-exact inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "attention/quest_page_select_args.h"
#include "backend/cpu/quest_page_select.h"
#include "core/dtype.h"
#include "../shuffled_pages.h"
#include "../quest_plan_check.h"
#include "../test_random.h"

namespace skim {
namespace {

struct Case {
  int group, num_kv_heads, head_dim;
  std::vector<int> lens;
  double budget;
  int min_tokens;
};

class QuestPageSelect : public ::testing::TestWithParam<Case> {};

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_f32(x[i]);
  return y;
}

TEST_P(QuestPageSelect, KeepsEachHeadsBestPagesAsAUnionWithMasks) {
  const Case c = GetParam();
  auto& rng = test::rng();
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const int ps = 16, d = c.head_dim, hkv = c.num_kv_heads, heads = hkv * c.group;
  const int batch = int(c.lens.size());
  const test::ShuffledPages pages = test::shuffled_pages(c.lens, ps, 3, 2, rng);
  std::vector<uint16_t> kmin(size_t(pages.num_pages) * hkv * d), kmax(kmin.size()), q(size_t(batch) * heads * d);
  for (size_t i = 0; i < kmin.size(); ++i) {
    const float x = gauss(rng), y = gauss(rng);
    kmin[i] = f32_to_bf16(std::min(x, y));
    kmax[i] = f32_to_bf16(std::max(x, y));
  }
  for (auto& x : q) x = f32_to_bf16(gauss(rng));

  const size_t slots = size_t(batch) * hkv * pages.stride;
  std::vector<int32_t> table(slots, -1), lens(size_t(batch) * hkv, -1);
  std::vector<uint32_t> masks(slots, 0u);
  QuestPageSelectArgs a{.batch = batch, .num_heads = heads, .num_kv_heads = hkv, .head_dim = d, .page_size = ps,
                        .max_pages_per_seq = pages.stride, .budget = c.budget, .min_tokens = c.min_tokens,
                        .q = q.data(), .kmin = kmin.data(), .kmax = kmax.data(), .page_table = pages.table.data(),
                        .seq_lens = c.lens.data(), .out_table = table.data(), .out_masks = masks.data(),
                        .out_lens = lens.data()};
  unsigned long long listed = 5;  // a running count: the lists' tokens are added to it
  a.listed_tokens = &listed;
  cpu::quest_page_select(a);
  EXPECT_EQ(listed, 5 + std::accumulate(lens.begin(), lens.end(), 0ull));
  a.listed_tokens = nullptr;

  // The fp32 form on the widened inputs: the same lists, masks and lengths.
  const std::vector<float> q32 = widen(q), kmin32 = widen(kmin), kmax32 = widen(kmax);
  std::vector<int32_t> table32(slots, -1), lens32(lens.size(), -1);
  std::vector<uint32_t> masks32(slots, 0u);
  QuestPageSelectArgsF32 f{.batch = batch, .num_heads = heads, .num_kv_heads = hkv, .head_dim = d, .page_size = ps,
                           .max_pages_per_seq = pages.stride, .budget = c.budget, .min_tokens = c.min_tokens,
                           .q = q32.data(), .kmin = kmin32.data(), .kmax = kmax32.data(),
                           .page_table = pages.table.data(), .seq_lens = c.lens.data(), .out_table = table32.data(),
                           .out_masks = masks32.data(), .out_lens = lens32.data()};
  cpu::quest_page_select(f);
  EXPECT_EQ(table32, table);
  EXPECT_EQ(masks32, masks);
  EXPECT_EQ(lens32, lens);

  test::check_quest_plan(a, pages.table, table, masks, lens);

  // by_score (ART's visiting order): the same pages and masks per list, the newest first, then
  // by descending best bound of the heads that keep a page (ties in position order).
  std::vector<int32_t> by_table(slots, -1), by_lens(lens.size(), -1);
  std::vector<uint32_t> by_masks(slots, 0u);
  QuestPageSelectArgsF32 bs = f;
  bs.by_score = true;
  bs.out_table = by_table.data();
  bs.out_masks = by_masks.data();
  bs.out_lens = by_lens.data();
  cpu::quest_page_select(bs);
  EXPECT_EQ(by_lens, lens);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) {
      const size_t list = size_t(b) * hkv + h, at = list * pages.stride;
      const int n = (lens[list] + ps - 1) / ps, m = (c.lens[size_t(b)] + ps - 1) / ps;
      if (n == 0) continue;
      std::vector<std::pair<int32_t, uint32_t>> pos_order, score_order;
      for (int i = 0; i < n; ++i) {
        pos_order.push_back({table[at + i], masks[at + i]});
        score_order.push_back({by_table[at + i], by_masks[at + i]});
      }
      EXPECT_EQ(score_order[0].first, pages.table[size_t(b) * pages.stride + m - 1]) << "the newest page first";
      std::vector<double> best;  // each listed page's best bound, recomputed
      for (auto [page, mask] : score_order) {
        double s_best = -INFINITY;
        for (int g = 0; g < c.group; ++g) {
          if (!(mask >> g & 1u)) continue;
          const float* qh = q32.data() + (size_t(b) * heads + h * c.group + g) * d;
          const size_t off = (size_t(page) * hkv + h) * d;
          double sb = 0;
          for (int i = 0; i < d; ++i) sb += std::max(double(qh[i]) * kmin32[off + i], double(qh[i]) * kmax32[off + i]);
          s_best = std::max(s_best, sb);
        }
        best.push_back(s_best);
      }
      for (int i = 2; i < n; ++i) EXPECT_GE(best[size_t(i - 1)], best[size_t(i)] - 1e-4) << "descending best bound";
      std::sort(pos_order.begin(), pos_order.end());
      std::sort(score_order.begin(), score_order.end());
      EXPECT_EQ(pos_order, score_order) << "the same pages and masks";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QuestPageSelect,
    ::testing::Values(Case{4, 2, 64, {1, 15, 16, 17, 0}, 0.2, 0},       // short: one or two pages
                      Case{3, 3, 64, {2049, 700, 33}, 0.2, 64},          // SmolLM2's group, a floor
                      Case{4, 2, 128, {5000}, 0.05, 0},                  // the demo model's shape
                      Case{12, 1, 64, {1600, 300}, 96.0, 0},             // absolute budget, 12 heads
                      Case{1, 4, 32, {900}, 1.0, 0}));                   // keep everything

}  // namespace
}  // namespace skim
