// Each selector against a brute-force reading of its own definition, on random caches.
#include "attention/selectors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "../test_random.h"
#include "backend/cpu/group_page_select.h"
#include "core/dtype.h"

namespace skim {
namespace {

struct RandomCache {
  KVCacheShape shape;
  PagedKVCache cache;
  PageTable table;
  std::vector<float> q;  // [num_heads][d] for one row
  int pos;

  // bf16_keys: keys rounded to bf16 values, so the fp32 digests are exact in bf16 too.
  RandomCache(int len, int kv_heads, int group, int d, bool bf16_keys = false)
      : shape{1, kv_heads, d, 16, (len + 15) / 16 + 4}, cache(shape) {
    cache.reserve(table, len);
    table.length = len;
    for (int p = 0; p < len; ++p) {
      auto k = test::random_vector(size_t(kv_heads) * d);
      if (bf16_keys)
        for (float& x : k) x = bf16_to_f32(f32_to_bf16(x));
      cache.write(0, table, p, k.data(), k.data());
    }
    q = test::random_vector(size_t(kv_heads) * group * d);
    pos = len - 1;
  }

  AttentionBatch batch(int kv_heads, int group, int d) {
    AttentionBatch b;
    b.num_rows = 1;
    b.num_heads = kv_heads * group;
    b.num_kv_heads = kv_heads;
    b.head_dim = d;
    b.decode = true;
    b.kv = cache.layer(0);
    b.positions = &pos;
    tables_[0] = &table;
    b.tables = tables_;
    b.q = q.data();
    return b;
  }
  const PageTable* tables_[1];

  // Quest's bound computed from the raw keys of page p (no digest).
  float bound(const float* qh, int p, int kv_head, int d) {
    float s = 0;
    for (int i = 0; i < d; ++i) {
      float mn = INFINITY, mx = -INFINITY;
      for (int t = p * 16; t < std::min(table.length, p * 16 + 16); ++t) {
        float k = cache.key(0, table, t, kv_head)[i];
        mn = std::min(mn, k);
        mx = std::max(mx, k);
      }
      s += std::max(qh[i] * mn, qh[i] * mx);
    }
    return s;
  }
};

std::set<int> pages_of(const std::vector<KeyRange>& ranges) {
  std::set<int> s;
  for (auto r : ranges)
    for (int t = r.begin; t < r.end; ++t) s.insert(t / 16);
  return s;
}

// The n best pages by score with `forced` always in: the definition, by full sort.
std::set<int> best_pages(std::vector<float> scores, int n, int forced) {
  std::vector<int> idx(scores.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int(i);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return scores[a] > scores[b]; });
  std::set<int> s = {forced};
  for (int i : idx) {
    if (int(s.size()) >= n) break;
    s.insert(i);
  }
  return s;
}

// `got` is the n best pages by score with `forced` always in (best_pages), up to near-ties at
// the boundary: the selectors sum a page's bound in another (vectorised) order than bound()
// here, so pages whose scores are within rounding of the last one taken may swap (seed 1168 over
// the whole binary: pages 9 and 14 at 47.9694672 and 47.969471, one float step apart, one in each
// set).
void expect_best_pages(const std::set<int>& got, const std::vector<float>& scores, int n, int forced,
                       const std::string& what) {
  const std::set<int> want = best_pages(scores, n, forced);
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_TRUE(got.count(forced)) << what;
  float last = INFINITY;  // the lowest score taken besides the forced page
  for (int p : want)
    if (p != forced) last = std::min(last, scores[size_t(p)]);
  const float eps = 1e-5f * (1.0f + std::fabs(last));
  for (int p : got) {
    if (!want.count(p)) {
      EXPECT_NEAR(scores[size_t(p)], last, eps) << what << ": page " << p << " taken";
    }
  }
  for (int p : want) {
    if (!got.count(p)) {
      EXPECT_NEAR(scores[size_t(p)], last, eps) << what << ": page " << p << " left out";
    }
  }
}

TEST(QuestSelector, TopPagesPerHeadByTheDigestBound) {
  for (int trial = 0; trial < 10; ++trial) {
    int len = test::random_int(100, 2000), kv_heads = 2, group = 3, d = 32;
    RandomCache rc(len, kv_heads, group, d);
    AttentionBatch b = rc.batch(kv_heads, group, d);
    QuestParams p;
    p.budget = 0.2;
    p.min_tokens = 64;
    QuestSelector sel(p);
    int pages = (len + 15) / 16;
    int n = (quest_budget_tokens(p.budget, p.min_tokens, len) + 15) / 16;
    for (int h = 0; h < kv_heads; ++h) {
      Selection s;
      sel.select(SelectInput{b, 0, h, len}, s);
      ASSERT_EQ(s.heads.size(), size_t(group));
      for (int g = 0; g < group; ++g) {
        const float* qh = rc.q.data() + size_t(h * group + g) * d;
        std::vector<float> scores(pages);
        for (int pg = 0; pg < pages; ++pg) scores[pg] = rc.bound(qh, pg, h, d);
        expect_best_pages(pages_of(s.heads[g]), scores, n, pages - 1,
                          "trial " + std::to_string(trial) + ", KV head " + std::to_string(h) + ", head " +
                              std::to_string(g));
      }
    }
  }
}

// The plan (what the pipeline attends) lists, per KV head, the union of its heads' pages in
// position order, each head's mask bit set exactly on the pages select() gives that head.
TEST(QuestSelector, PlanIsTheUnionOfItsHeadsSelectionsWithAMaskPerHead) {
  for (int trial = 0; trial < 10; ++trial) {
    const int len = test::random_int(1, 2000), kv_heads = 2, group = 3, d = 32;
    RandomCache rc(len, kv_heads, group, d);
    AttentionBatch b = rc.batch(kv_heads, group, d);
    QuestSelector sel(QuestParams{.budget = 0.2, .min_tokens = 64});
    PagePlan plan;
    ASSERT_TRUE(sel.plan(b, plan));
    ASSERT_TRUE(plan.per_kv_head);
    ASSERT_EQ(plan.lists(), kv_heads);
    for (int h = 0; h < kv_heads; ++h) {
      Selection s;
      sel.select(SelectInput{b, 0, h, len}, s);
      std::set<int> uni;
      std::vector<std::set<int>> per_head(group);
      const int listed = (plan.lens[size_t(h)] + 15) / 16;
      for (int i = 0; i < listed; ++i) {
        const int page = int(std::find(rc.table.pages.begin(), rc.table.pages.end(), plan.list(h)[i]) - rc.table.pages.begin());
        ASSERT_TRUE(uni.empty() || page > *uni.rbegin()) << "list not in position order";
        uni.insert(page);
        for (int g = 0; g < group; ++g)
          if (plan.head_masks[size_t(h) * plan.max_pages + i] >> g & 1u) per_head[g].insert(page);
      }
      std::set<int> want_union;
      for (int g = 0; g < group; ++g) {
        EXPECT_EQ(per_head[g], pages_of(s.heads[g])) << "KV head " << h << ", head " << g;
        want_union.merge(pages_of(s.heads[g]));
      }
      EXPECT_EQ(uni, want_union);
      EXPECT_EQ(plan.lens[size_t(h)], (listed - 1) * 16 + len - (len - 1) / 16 * 16) << "the newest page is last";
    }
  }
}

TEST(OracleSelector, TheBudgetKeysOfLargestScorePerHeadInDescendingOrder) {
  for (int trial = 0; trial < 5; ++trial) {
    int len = test::random_int(50, 800), kv_heads = 2, group = 3, d = 16;
    RandomCache rc(len, kv_heads, group, d);
    AttentionBatch b = rc.batch(kv_heads, group, d);
    QuestParams p;
    p.budget = 0.1;
    p.min_tokens = 8;
    OracleSelector sel(p);
    const int n = quest_budget_tokens(p.budget, p.min_tokens, len);
    for (int h = 0; h < kv_heads; ++h) {
      Selection s;
      sel.select(SelectInput{b, 0, h, len}, s);
      ASSERT_EQ(s.heads.size(), size_t(group));
      for (int g = 0; g < group; ++g) {
        const float* qh = rc.q.data() + size_t(h * group + g) * d;
        // The definition, by exact (double) scores: the n chosen keys are distinct, come in
        // descending score order, and no key left out scores above the last one chosen. The
        // selector sums in float, so near-ties may swap: compare within a float tolerance.
        std::vector<double> score(size_t(len), 0.0);
        for (int t = 0; t < len; ++t)
          for (int i = 0; i < d; ++i) score[size_t(t)] += double(qh[i]) * rc.cache.key(0, rc.table, t, h)[i];
        const double tol = 1e-4;
        ASSERT_EQ(s.heads[g].size(), size_t(n));
        std::set<int> chosen;
        for (int i = 0; i < n; ++i) {
          const int t = s.heads[g][i].begin;
          ASSERT_EQ(s.heads[g][i].end, t + 1);
          ASSERT_TRUE(t >= 0 && t < len);
          EXPECT_TRUE(chosen.insert(t).second) << "key " << t << " chosen twice";
          if (i > 0) {
            EXPECT_LE(score[size_t(t)], score[size_t(s.heads[g][i - 1].begin)] + tol) << "rank " << i;
          }
        }
        const double last = score[size_t(s.heads[g][size_t(n) - 1].begin)];
        for (int t = 0; t < len; ++t)
          if (!chosen.count(t)) {
            EXPECT_LE(score[size_t(t)], last + tol) << "key " << t << " left out";
          }
      }
    }
  }
}

TEST(QuestSelector, BudgetIsRelativeWithAFloorOrAbsolute) {
  EXPECT_EQ(quest_budget_tokens(0.15, 256, 10000), 1500);
  EXPECT_EQ(quest_budget_tokens(0.15, 256, 1000), 256);
  EXPECT_EQ(quest_budget_tokens(0.15, 256, 100), 100);
  EXPECT_EQ(quest_budget_tokens(512, 256, 10000), 512);
}

TEST(GroupBlockSelector, SharedTopBlocksOfTheMeanQueryWithLocalBlocks) {
  for (int trial = 0; trial < 10; ++trial) {
    int len = test::random_int(300, 3000), kv_heads = 2, group = 4, d = 32;
    RandomCache rc(len, kv_heads, group, d);
    AttentionBatch b = rc.batch(kv_heads, group, d);
    GroupBlockParams p;
    p.keep = 0.1;
    p.n_min = 4;
    p.n_local = 2;
    GroupBlockSelector sel(p);
    int blocks = (len + 15) / 16;
    int n = std::max(p.n_min, int(std::ceil(blocks * p.keep)));
    for (int h = 0; h < kv_heads; ++h) {
      Selection s;
      sel.select(SelectInput{b, 0, h, len}, s);
      ASSERT_TRUE(s.shared());
      std::vector<float> mean(d, 0.0f);
      for (int g = 0; g < group; ++g)
        for (int i = 0; i < d; ++i) mean[i] += rc.q[size_t(h * group + g) * d + i] / group;
      std::vector<float> scores(blocks);
      for (int pg = 0; pg < blocks; ++pg) scores[pg] = rc.bound(mean.data(), pg, h, d);
      scores[blocks - 2] = INFINITY;  // n_local = 2 recent blocks
      expect_best_pages(pages_of(s.heads[0]), scores, n, blocks - 1,
                        "trial " + std::to_string(trial) + ", KV head " + std::to_string(h));
    }
  }
}

// The GPU's selection has a CPU reference (backend/cpu/group_page_select.h) with its own
// argument form; it must choose what the policy chooses.
TEST(GroupBlockSelector, SameChoiceAsTheGroupPageSelectReference) {
  for (int trial = 0; trial < 5; ++trial) {
    const int len = test::random_int(1, 4000), kv_heads = 2, group = 4, d = 64;
    RandomCache rc(len, kv_heads, group, d, /*bf16_keys=*/true);
    for (float& x : rc.q) x = bf16_to_f32(f32_to_bf16(x));  // the reference reads bf16 queries
    std::vector<uint16_t> q_bf16(rc.q.size());
    for (size_t i = 0; i < q_bf16.size(); ++i) q_bf16[i] = f32_to_bf16(rc.q[i]);
    AttentionBatch b = rc.batch(kv_heads, group, d);
    GroupBlockParams p;
    GroupBlockSelector sel(p);

    GroupPageSelectArgs a;
    a.batch = 1;
    a.num_heads = kv_heads * group;
    a.num_kv_heads = kv_heads;
    a.head_dim = d;
    a.max_pages_per_seq = int(rc.table.pages.size());
    a.keep = p.keep;
    a.n_min = p.n_min;
    a.n_local = p.n_local;
    a.q = q_bf16.data();
    // The reference reads bf16 digests: the cache's, exactly (its keys are bf16 values).
    const size_t digest_elems = size_t(rc.shape.num_pages) * kv_heads * d;
    std::vector<uint16_t> kmin(digest_elems), kmax(digest_elems);
    for (size_t i = 0; i < digest_elems; ++i) {
      kmin[i] = f32_to_bf16(b.kv.kmin[i]);
      kmax[i] = f32_to_bf16(b.kv.kmax[i]);
      ASSERT_EQ(bf16_to_f32(kmin[i]), b.kv.kmin[i]);
    }
    a.kmin = kmin.data();
    a.kmax = kmax.data();
    a.page_table = rc.table.pages.data();
    a.seq_lens = &len;
    std::vector<int32_t> out_table(size_t(kv_heads) * a.max_pages_per_seq), out_lens(kv_heads);
    a.out_table = out_table.data();
    a.out_lens = out_lens.data();
    cpu::group_page_select(a);

    for (int h = 0; h < kv_heads; ++h) {
      Selection s;
      sel.select(SelectInput{b, 0, h, len}, s);
      const std::set<int> policy = pages_of(s.heads[0]);
      std::set<int> reference;
      for (int i = 0; i < (out_lens[h] + 15) / 16; ++i) {
        const int32_t id = out_table[size_t(h) * a.max_pages_per_seq + i];
        reference.insert(int(std::find(rc.table.pages.begin(), rc.table.pages.end(), id) - rc.table.pages.begin()));
      }
      EXPECT_EQ(reference, policy) << "len " << len << ", KV head " << h;
    }
    // The batch's plan (what the pipeline attends) is the reference's output, list for list.
    PagePlan plan;
    ASSERT_TRUE(sel.plan(b, plan));
    ASSERT_TRUE(plan.per_kv_head);
    ASSERT_EQ(plan.lists(), kv_heads);
    for (int h = 0; h < kv_heads; ++h) {
      ASSERT_EQ(plan.lens[size_t(h)], out_lens[size_t(h)]) << "KV head " << h;
      for (int i = 0; i < (out_lens[size_t(h)] + 15) / 16; ++i)
        ASSERT_EQ(plan.list(h)[i], out_table[size_t(h) * a.max_pages_per_seq + i]) << "KV head " << h << ", entry " << i;
    }
  }
}

// Streaming keeps whole pages: those holding a sink token or a token of the window, the same
// keys in select() (ranges) and plan() (a list per row).
TEST(StreamingSelector, SinksAndRecentWindowInWholePages) {
  for (int trial = 0; trial < 20; ++trial) {
    const int len = test::random_int(1, 700), sink = test::random_int(0, 40), window = test::random_int(1, 300);
    RandomCache rc(len, 1, 1, 16);
    AttentionBatch b = rc.batch(1, 1, 16);
    StreamingSelector sel(StreamingParams{sink, window});
    Selection s;
    sel.select(SelectInput{b, 0, 0, len}, s);
    std::set<int> got, want;
    for (auto r : s.heads[0])
      for (int t = r.begin; t < r.end; ++t) EXPECT_TRUE(got.insert(t).second) << "key " << t << " twice";
    for (int t = 0; t < len; ++t)
      if (t / 16 < (sink + 15) / 16 || t / 16 >= std::max(0, len - window) / 16) want.insert(t);
    EXPECT_EQ(got, want) << "len " << len << " sink " << sink << " window " << window;
    EXPECT_EQ(s.heads[0][0].end, len) << "the recent window first";

    PagePlan plan;
    ASSERT_TRUE(sel.plan(b, plan));
    ASSERT_FALSE(plan.per_kv_head);
    std::set<int> planned;
    for (int i = 0; i < (plan.lens[0] + 15) / 16; ++i) {
      const int page = int(std::find(rc.table.pages.begin(), rc.table.pages.end(), plan.list(0)[i]) - rc.table.pages.begin());
      for (int t = page * 16; t < std::min(len, page * 16 + 16); ++t) planned.insert(t);
    }
    EXPECT_EQ(planned, want);
    EXPECT_EQ(plan.lens[0], int(want.size()));
  }
}

}  // namespace
}  // namespace skim
