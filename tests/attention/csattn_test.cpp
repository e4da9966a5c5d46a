// CSAttention's selector: bounded sorted lists, and with lists that hold every key and K =
// context the selection is every key (dense); recall of the true top-K is then 1.
#include "attention/csattn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "../test_random.h"
#include "core/dtype.h"

namespace skim {
namespace {

TEST(CsTopList, TryInsertKeepsSortedAndBounded) {
  const int cap = 37;
  TopList list(cap);
  std::vector<std::pair<float, int>> all;
  for (int i = 0; i < 500; ++i) {
    float s = test::random_vector(1)[0];
    list.try_insert(i, s);
    all.push_back({f16_to_f32(f32_to_f16(s)), i});
    ASSERT_LE(list.size(), cap);
    for (int j = 1; j < list.size(); ++j) ASSERT_GE(list.score(j - 1), list.score(j));
  }
  EXPECT_EQ(list.size(), cap);
  EXPECT_EQ(list.capacity(), cap);
  // It holds the cap largest (fp16-rounded) scores: compare the score multisets.
  std::sort(all.begin(), all.end(), [](auto a, auto b) { return a.first > b.first; });
  for (int j = 0; j < cap; ++j) EXPECT_EQ(list.score(j), all[size_t(j)].first);
  // A score below the minimum is refused; above it replaces the minimum.
  EXPECT_FALSE(list.try_insert(1000, list.score(cap - 1) - 1.0f));
  EXPECT_TRUE(list.try_insert(1001, list.score(0) + 1.0f));
  EXPECT_EQ(list.index(0), 1001);
  EXPECT_EQ(list.size(), cap);
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
  EXPECT_EQ(cs.table_bytes(), uint64_t(4) * 16 * (4 * sizeof(float) * 2 + 64 * TopList::kEntryBytes));
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
