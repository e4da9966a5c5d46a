// CSAttention's selector: bounded sorted lists, and with lists that hold every key and K =
// context the selection is every key (dense); recall of the true top-K is then 1. The built
// lists and the selection equal their plain definitions (every score by a loop, a sort of all
// candidates) on random inputs.
#include "attention/csattn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "../test_random.h"
#include "backend/cpu/kmeans.h"
#include "core/dtype.h"

namespace skim {
namespace {

TEST(CsTopList, TryInsertKeepsSortedAndBounded) {
  const int cap = 37;
  TopListStorage store(cap);
  TopList list = store.list();
  std::vector<std::pair<float, int>> all;
  for (int i = 0; i < 500; ++i) {
    float s = test::random_vector(1)[0];
    list.try_insert(i, s);
    all.push_back({f16_to_f32(f32_to_f16(s)), i});
    ASSERT_LE(list.size(), cap);
    // The minimum is at hand, and it is the minimum.
    for (int j = 0; j < list.size(); ++j) ASSERT_LE(list.min_score(), list.score(j));
  }
  EXPECT_EQ(list.size(), cap);
  EXPECT_EQ(list.capacity(), cap);
  // It holds the cap largest (fp16-rounded) scores, ties to the earlier arrival (the smaller
  // index): compare the entries, sorted, with the definition.
  std::sort(all.begin(), all.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<TopList::Entry> got = list.sorted();
  for (int j = 0; j < cap; ++j) {
    EXPECT_EQ(got[size_t(j)].score, all[size_t(j)].first);
    EXPECT_EQ(got[size_t(j)].index, all[size_t(j)].second);
  }
  // A score below the minimum is refused, as is an equal one; above it replaces the minimum.
  EXPECT_FALSE(list.try_insert(1000, list.min_score() - 1.0f));
  EXPECT_FALSE(list.try_insert(1002, list.min_score()));
  EXPECT_TRUE(list.try_insert(1001, got[0].score + 1.0f));
  EXPECT_EQ(list.sorted()[0].index, 1001);
  EXPECT_EQ(list.size(), cap);
}

// Many equal (fp16) scores: the later arrivals are the ones evicted, as in a list kept sorted
// with ties in arrival order; assign_sorted then inserts behave as inserts from empty.
TEST(CsTopList, TiesEvictTheLaterArrival) {
  const int cap = 16;
  TopListStorage built_store(cap), streamed_store(cap);
  TopList built = built_store.list(), streamed = streamed_store.list();
  std::vector<std::pair<float, int>> all;
  for (int i = 0; i < 200; ++i) all.push_back({float(test::random_int(0, 6)) * 0.25f, i});
  std::vector<std::pair<float, int>> first(all.begin(), all.begin() + 40);
  std::sort(first.begin(), first.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<int32_t> idx;
  std::vector<float> sc;
  for (int j = 0; j < cap; ++j) {
    idx.push_back(first[size_t(j)].second);
    sc.push_back(first[size_t(j)].first);
  }
  built.assign_sorted(idx.data(), sc.data(), cap);
  for (int i = 0; i < 40; ++i) streamed.try_insert(all[size_t(i)].second, all[size_t(i)].first);
  for (int i = 40; i < 200; ++i) {
    built.try_insert(all[size_t(i)].second, all[size_t(i)].first);
    streamed.try_insert(all[size_t(i)].second, all[size_t(i)].first);
  }
  std::sort(all.begin(), all.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  auto a = built.sorted(), b = streamed.sorted();
  for (int j = 0; j < cap; ++j) {
    EXPECT_EQ(a[size_t(j)].index, all[size_t(j)].second);
    EXPECT_EQ(b[size_t(j)].index, all[size_t(j)].second);
  }
}

// A one-layer cache, a prefill of `prompt` rows with random queries, then decode rows.
struct CsFixture {
  int kv_heads, group, d;
  KVCacheShape shape;
  PagedKVCache cache;
  PageTable table;
  std::vector<int32_t> pos;
  std::vector<const PageTable*> tables;
  std::vector<float> q;

  CsFixture(int kvh, int g, int dim, int capacity_tokens)
      : kv_heads(kvh), group(g), d(dim), shape{1, kvh, dim, 16, capacity_tokens / 16 + 2}, cache(shape) {
    cache.reserve(table, capacity_tokens);
  }

  AttentionBatch rows(int first, int n, bool decode) {
    pos.clear();
    tables.assign(size_t(n), &table);
    for (int i = 0; i < n; ++i) {
      auto k = test::random_vector(size_t(kv_heads) * d);
      cache.write(0, table, first + i, k.data(), k.data());
      pos.push_back(first + i);
    }
    table.length = first + n;
    q = test::random_vector(size_t(n) * kv_heads * group * d);
    AttentionBatch b;
    b.num_rows = n;
    b.num_heads = kv_heads * group;
    b.num_kv_heads = kv_heads;
    b.head_dim = d;
    b.decode = decode;
    b.kv = cache.layer(0);
    b.positions = pos.data();
    b.tables = tables.data();
    b.q = q.data();
    return b;
  }
};

std::set<int> keys_of(const std::vector<KeyRange>& r) {
  std::set<int> s;
  for (auto x : r)
    for (int t = x.begin; t < x.end; ++t) EXPECT_TRUE(s.insert(t).second) << "key " << t << " twice";
  return s;
}

TEST(CsSelector, FullListsAndFullKeepEqualDense) {
  for (bool pool : {false, true}) {
    const int prompt = 300, steps = 5;
    CsFixture f(2, 2, 16, prompt + steps);
    CsParams p;
    p.subspaces = 4;
    p.centroids = 8;
    p.list = prompt + steps;  // every key fits: nothing is ever evicted
    p.keep = 1.0;
    p.window = 4;
    p.pool_group = pool;
    p.recall = true;
    CsSelector cs(p);
    cs.observe(f.rows(0, prompt, false));
    for (int s = 0; s < steps; ++s) {
      AttentionBatch b = f.rows(prompt + s, 1, true);
      cs.observe(b);
      for (int h = 0; h < f.kv_heads; ++h) {
        Selection sel;
        cs.select(SelectInput{b, 0, h, prompt + s + 1}, sel);
        ASSERT_EQ(sel.heads.size(), pool ? size_t(1) : size_t(f.group));
        for (auto& r : sel.heads) {
          std::set<int> k = keys_of(r);
          EXPECT_EQ(int(k.size()), prompt + s + 1) << "pool " << pool << " step " << s;
          // The recent window comes first.
          EXPECT_EQ(r[0].begin, prompt + s + 1 - p.window);
          EXPECT_EQ(r[0].end, prompt + s + 1);
        }
      }
    }
    auto c = cs.counters();
    EXPECT_DOUBLE_EQ(c["cs_recall"], 1.0);
    EXPECT_GT(c["cs_table_bytes"], 0.0);
  }
}

TEST(CsSelector, SelectsKeepTimesContextInScoreOrder) {
  const int prompt = 640;
  CsFixture f(1, 4, 32, prompt + 1);
  CsParams p;
  p.subspaces = 4;
  p.centroids = 16;
  p.list = 0.1;
  p.keep = 0.1;
  p.window = 16;
  CsSelector cs(p);
  cs.observe(f.rows(0, prompt, false));
  AttentionBatch b = f.rows(prompt, 1, true);
  cs.observe(b);
  Selection sel;
  cs.select(SelectInput{b, 0, 0, prompt + 1}, sel);
  const int K = int(std::ceil(0.1 * (prompt + 1)));
  for (auto& r : sel.heads) {
    std::set<int> k = keys_of(r);
    EXPECT_EQ(int(k.size()), K);
    for (int t = prompt + 1 - 16; t <= prompt; ++t) EXPECT_TRUE(k.count(t));
  }
  // Lists are bounded by L = 0.1 x prompt and sorted.
  EXPECT_EQ(cs.table_bytes(), uint64_t(4) * 16 * (4 * sizeof(float) * 2 + sizeof(float) + 64 * TopList::kEntryBytes));
}

// Partial score of a key slice against a unit centroid: cosine or dot (CsParams::score_dot).
float plain_score(const float* c, const float* key_slice, int ds, bool dot) {
  std::vector<float> k(key_slice, key_slice + ds);
  if (!dot) normalize(k.data(), ds);
  double s = 0;
  for (int t = 0; t < ds; ++t) s += double(c[t]) * k[size_t(t)];
  return float(s);
}

CsParams small_params(bool dot, bool mean, bool pool) {
  CsParams p;
  p.subspaces = 4;
  p.centroids = 8;
  p.iters = 3;
  p.list = 30;
  p.keep = 0.1;
  p.window = 8;
  p.score_dot = dot;
  p.missing_mean = mean;
  p.pool_group = pool;
  return p;
}

// Every list holds the L largest scores of the keys seen so far, sorted; `tail` is the mean
// score of the prompt keys a list left out.
TEST(CsSelector, ListsHoldTheTopScoresAndTheirTailMean) {
  for (bool dot : {false, true}) {
    const int prompt = 200, d = 16;
    CsFixture f(1, 2, d, prompt + 1);
    CsParams p = small_params(dot, true, false);
    CsSelector cs(p);
    cs.observe(f.rows(0, prompt, false));
    AttentionBatch b = f.rows(prompt, 1, true);
    std::vector<float> zero(static_cast<size_t>(d), 0.0f);  // the decode key scores 0: it stays out
    f.cache.write(0, f.table, prompt, zero.data(), zero.data());
    cs.observe(b);
    const CsGroupTables* g = cs.tables(&f.table, 0, 0);
    ASSERT_TRUE(g && g->built);
    SeqKV kv{f.cache.layer(0), f.table.pages.data(), 0};
    const int ds = d / p.subspaces;
    for (int m = 0; m < p.subspaces; ++m)
      for (int c = 0; c < p.centroids; ++c) {
        const float* cen = g->centroids.data() + (size_t(m) * p.centroids + c) * ds;
        const TopList list = g->list(m * p.centroids + c);
        ASSERT_EQ(list.size(), 30);
        std::set<int> members;
        for (int i = 0; i < list.size(); ++i) {
          members.insert(list.index(i));
          EXPECT_LE(list.min_score(), list.score(i));
          EXPECT_NEAR(list.score(i), plain_score(cen, kv.key(list.index(i)) + m * ds, ds, dot), 2e-3f);
        }
        double left = 0;
        for (int j = 0; j < prompt; ++j) {
          const float s = plain_score(cen, kv.key(j) + m * ds, ds, dot);
          if (members.count(j)) continue;
          EXPECT_LE(s, list.min_score() + 2e-3f) << "key " << j << " scores above the list's minimum";
          left += s;
        }
        EXPECT_NEAR(g->tail[size_t(m) * p.centroids + c], left / (prompt - 30), 1e-4) << "dot " << dot;
      }
  }
}

// The selection is the window, then the n_pick keys below it with the largest summed score
// (ties by index), where a key's score is the sum over its subspaces' picked lists of
// weight x (list score - floor): weight |q_s| for dot scores (1 for cosine), floor the list's
// tail mean with missing=mean (0 otherwise), and the picked lists the nearest centroid's, or
// the top backoff_top when the best cosine is below the back-off. All of it by plain loops.
TEST(CsSelector, SelectionEqualsPlainScoring) {
  for (int variant = 0; variant < 16; ++variant) {
    const bool dot = variant & 1, mean = variant & 2, pool = variant & 4, backoff = variant & 8;
    const int prompt = 300, d = 16, group = 3;
    CsFixture f(2, group, d, prompt + 1);
    CsParams p = small_params(dot, mean, pool);
    if (backoff) p.backoff = 1.0;  // every subspace backs off to its best 2 centroids
    CsSelector cs(p);
    cs.observe(f.rows(0, prompt, false));
    AttentionBatch b = f.rows(prompt, 1, true);
    cs.observe(b);
    const int ctx = prompt + 1, ds = d / p.subspaces, C = p.centroids;
    const int wb = ctx - p.window, K = int(std::ceil(p.keep * ctx)), n_pick = K - p.window;
    for (int h = 0; h < f.kv_heads; ++h) {
      Selection sel, by_position;
      cs.select(SelectInput{b, 0, h, ctx}, sel);
      cs.select(SelectInput{b, 0, h, ctx, /*ordered=*/false}, by_position);
      const CsGroupTables* g = cs.tables(&f.table, 0, h);
      ASSERT_EQ(sel.heads.size(), pool ? size_t(1) : size_t(group));
      for (size_t u = 0; u < sel.heads.size(); ++u) {
        std::vector<float> q(static_cast<size_t>(d), 0.0f);
        const float* q0 = f.q.data() + size_t(h) * group * d;
        if (pool) {
          for (int x = 0; x < group; ++x)
            for (int i = 0; i < d; ++i) q[size_t(i)] += q0[size_t(x) * d + i] / float(group);
        } else {
          std::copy_n(q0 + u * d, d, q.begin());
        }
        std::map<int, float> score;
        for (int m = 0; m < p.subspaces; ++m) {
          std::vector<float> qs(q.begin() + m * ds, q.begin() + (m + 1) * ds);
          const float norm = normalize(qs.data(), ds);
          std::vector<std::pair<float, int>> by_cos;
          for (int c = 0; c < C; ++c) {
            float s = 0;
            for (int t = 0; t < ds; ++t) s += g->centroids[(size_t(m) * C + c) * ds + t] * qs[size_t(t)];
            by_cos.push_back({-s, c});
          }
          std::sort(by_cos.begin(), by_cos.end());
          const int take = -by_cos[0].first < p.backoff ? p.backoff_top : 1;
          for (int t = 0; t < take; ++t) {
            const int c = by_cos[size_t(t)].second;
            const TopList list = g->list(m * C + c);
            const float floor = mean ? g->tail[size_t(m) * C + c] : 0.0f;
            for (int i = 0; i < list.size(); ++i) score[list.index(i)] += (dot ? norm : 1.0f) * (list.score(i) - floor);
          }
        }
        std::vector<std::pair<float, int>> ranked;
        for (auto [k, s] : score)
          if (k < wb) ranked.push_back({-s, k});
        std::sort(ranked.begin(), ranked.end());
        std::vector<KeyRange> want = {{wb, ctx}};
        for (int i = 0; i < std::min(n_pick, int(ranked.size())); ++i)
          want.push_back({ranked[size_t(i)].second, ranked[size_t(i)].second + 1});
        const auto& got = sel.heads[u];
        ASSERT_EQ(got.size(), want.size()) << "variant " << variant << " head " << h << " unit " << u;
        EXPECT_TRUE(got[0].begin == wb && got[0].end == ctx) << "variant " << variant << ": the window comes first";
        // Entry by entry the same key, or one whose score is equal within rounding: the code's
        // SIMD dot may order two near-equal centroid cosines differently, which changes the
        // last bits of a sum and so the order of near-equal keys.
        for (size_t i = 1; i < want.size(); ++i) {
          const int k = got[i].begin, w = want[i].begin;
          ASSERT_EQ(got[i].end, k + 1) << "variant " << variant << " entry " << i;
          const float a = score.count(k) ? score[k] : -INFINITY, c = score[w];
          EXPECT_TRUE(k == w || std::fabs(a - c) <= 1e-5f * (1.0f + std::fabs(c)))
              << "variant " << variant << " head " << h << " unit " << u << " entry " << i << ": got key " << k
              << " (score " << a << "), want key " << w << " (score " << c << ")";
        }
        // Unordered (no traversal follows it): the same keys by position, neighbours joined.
        const auto& joined = by_position.heads[u];
        EXPECT_EQ(keys_of(joined), keys_of(got)) << "variant " << variant << " head " << h << " unit " << u;
        for (size_t i = 1; i < joined.size(); ++i)
          EXPECT_LT(joined[i - 1].end, joined[i].begin) << "variant " << variant << " head " << h << " unit " << u;
      }
    }
  }
}

TEST(CsSelector, ForkCopiesTables) {
  const int prompt = 100;
  CsFixture f(1, 2, 16, prompt + 1);
  CsParams p;
  p.subspaces = 2;
  p.centroids = 4;
  CsSelector cs(p);
  cs.observe(f.rows(0, prompt, false));
  PageTable other;
  cs.fork(&f.table, &other);
  AttentionBatch b = f.rows(prompt, 1, true);
  cs.observe(b);
  EXPECT_GT(cs.table_bytes(), 0u);
  cs.forget(&f.table);
  cs.forget(&other);
  EXPECT_EQ(cs.table_bytes(), 0u);
}

}  // namespace
}  // namespace skim
