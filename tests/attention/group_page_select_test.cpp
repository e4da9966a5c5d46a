// cpu::group_page_select (the oracle of the CUDA kernels) against its definition: scores
// recomputed in double from the pooled query and the digests, the n = min(M, max(n_min,
// ceil(M keep))) best pages kept with the n_local newest forced, every kept page scoring at
// least every dropped one, lists in position order with the newest page last.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attention/group_page_select_args.h"
#include "backend/cpu/group_page_select.h"
#include "core/dtype.h"
#include "../shuffled_pages.h"
#include "../test_random.h"

namespace skim {
namespace {

struct Case {
  int group, num_kv_heads, head_dim;
  std::vector<int> lens;
  double keep;
  int n_min, n_local;
};

class GroupPageSelectReference : public ::testing::TestWithParam<Case> {};

TEST_P(GroupPageSelectReference, KeepsTheBestPagesByTheBound) {
  const Case c = GetParam();
  auto& rng = test::rng();
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const int ps = 16, d = c.head_dim, hkv = c.num_kv_heads, heads = hkv * c.group;
  const int batch = int(c.lens.size());
  const test::ShuffledPages pages = test::shuffled_pages(c.lens, ps, 3, 2, rng);
  std::vector<uint16_t> kmin(size_t(pages.num_pages) * hkv * d), kmax(kmin.size());  // bf16 digests
  for (size_t i = 0; i < kmin.size(); ++i) {
    const float x = gauss(rng), y = gauss(rng);
    kmin[i] = f32_to_bf16(std::min(x, y));
    kmax[i] = f32_to_bf16(std::max(x, y));
  }
  std::vector<uint16_t> q(size_t(batch) * heads * d);
  for (auto& x : q) x = f32_to_bf16(gauss(rng));

  GroupPageSelectArgs a;
  a.batch = batch;
  a.num_heads = heads;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.page_size = ps;
  a.max_pages_per_seq = pages.stride;
  a.keep = c.keep;
  a.n_min = c.n_min;
  a.n_local = c.n_local;
  std::vector<int32_t> out_table(size_t(batch) * hkv * pages.stride, -1), out_lens(size_t(batch) * hkv, -1);
  a.q = q.data();
  a.kmin = kmin.data();
  a.kmax = kmax.data();
  a.page_table = pages.table.data();
  a.seq_lens = c.lens.data();
  a.out_table = out_table.data();
  a.out_lens = out_lens.data();
  std::vector<float> scores;
  cpu::group_page_select(a, &scores);
  // by_score: the same pages in descending bound order, the newest first, ties by position.
  std::vector<int32_t> by_score(out_table.size(), -1), by_score_lens(out_lens.size(), -1);
  GroupPageSelectArgs bs = a;
  bs.by_score = true;
  bs.out_table = by_score.data();
  bs.out_lens = by_score_lens.data();
  cpu::group_page_select(bs);
  EXPECT_EQ(by_score_lens, out_lens);

  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) {
      SCOPED_TRACE(::testing::Message() << "sequence " << b << ", KV head " << h);
      const int m = pages.pages_of(c.lens[b], ps);
      const size_t list = size_t(b) * hkv + h;
      const int n = m == 0 ? 0 : std::min(m, std::max(c.n_min, int(std::ceil(m * c.keep))));
      // Kept positions, from the page ids of the list.
      std::vector<int> kept;
      for (int i = 0; i < n; ++i) {
        const int32_t id = out_table[list * pages.stride + i];
        const auto it = std::find(pages.table.begin() + b * pages.stride,
                                  pages.table.begin() + b * pages.stride + m, id);
        ASSERT_NE(it, pages.table.begin() + b * pages.stride + m) << "page id " << id << " is not the sequence's";
        kept.push_back(int(it - (pages.table.begin() + b * pages.stride)));
      }
      if (m > 0) {
        EXPECT_EQ(out_table[list * pages.stride + n], -1) << "more than n pages listed";
      }
      ASSERT_TRUE(std::is_sorted(kept.begin(), kept.end())) << "list not in position order";
      ASSERT_EQ(std::adjacent_find(kept.begin(), kept.end()), kept.end()) << "a page listed twice";
      EXPECT_EQ(out_lens[list], m == 0 ? 0 : (n - 1) * ps + c.lens[b] - (m - 1) * ps);
      if (m == 0) continue;
      EXPECT_EQ(kept.back(), m - 1) << "the newest page is not last";
      // Scores against the definition, in double.
      std::vector<double> qm(d, 0.0);
      for (int g = 0; g < c.group; ++g)
        for (int i = 0; i < d; ++i) qm[i] += bf16_to_f32(q[(size_t(b) * heads + h * c.group + g) * d + i]) / c.group;
      std::vector<bool> is_kept(m, false);
      for (int p : kept) is_kept[p] = true;
      const int forced = std::min(c.n_local, m);
      double worst_kept = INFINITY, best_dropped = -INFINITY;
      for (int p = 0; p < m; ++p) {
        const float got = scores[list * pages.stride + p];
        if (p >= m - std::max(forced, 1)) {
          if (p >= m - forced) {
            EXPECT_TRUE(std::isinf(got)) << "forced page " << p;
          }
          if (n >= forced || p == m - 1) {
            EXPECT_TRUE(is_kept[p]) << "forced page " << p << " dropped";
          }
          continue;
        }
        const size_t off = (size_t(pages.table[b * pages.stride + p]) * hkv + h) * d;
        double want = 0;
        for (int i = 0; i < d; ++i)
          want += std::max(qm[i] * bf16_to_f32(kmin[off + i]), qm[i] * bf16_to_f32(kmax[off + i]));
        ASSERT_NEAR(got, want, 1e-4 * (1 + std::fabs(want))) << "score of page " << p;
        if (is_kept[p]) worst_kept = std::min(worst_kept, double(got));
        else best_dropped = std::max(best_dropped, double(got));
      }
      EXPECT_GE(worst_kept, best_dropped) << "a dropped page scores above a kept one";
      std::vector<int> ordered;
      for (int i = 0; i < n; ++i) {
        const int32_t id = by_score[list * pages.stride + i];
        ordered.push_back(int(std::find(pages.table.begin() + b * pages.stride,
                                        pages.table.begin() + b * pages.stride + m, id) -
                              (pages.table.begin() + b * pages.stride)));
      }
      EXPECT_EQ(ordered.front(), m - 1) << "by_score: the newest page first";
      for (int i = 2; i < n; ++i) {  // after the newest: by bound, ties (the other forced pages) by position
        const float prev = scores[list * pages.stride + ordered[i - 1]], cur = scores[list * pages.stride + ordered[i]];
        EXPECT_TRUE(cur < prev || (cur == prev && ordered[i] > ordered[i - 1])) << "by_score: order at " << i;
      }
      std::sort(ordered.begin(), ordered.end());
      EXPECT_EQ(ordered, kept) << "by_score: another set of pages";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GroupPageSelectReference,
    ::testing::Values(Case{4, 2, 64, {1, 15, 16, 17, 0}, 0.1, 16, 1},        // short: every page kept
                      Case{4, 8, 128, {8192, 3001}, 0.1, 16, 1},             // the benchmark's shape
                      Case{8, 1, 128, {5000}, 0.05, 4, 3},                   // several forced pages
                      Case{1, 3, 64, {2049, 700, 33}, 0.3, 1, 0},            // no recent page forced
                      Case{4, 2, 128, {1600}, 1.0, 16, 1},                   // keep everything
                      Case{2, 2, 64, {800, 1}, 0.01, 1, 60}));               // n_local > n

}  // namespace
}  // namespace skim
