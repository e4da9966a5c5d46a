#include "kv/paged_kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "../test_random.h"

namespace skim {
namespace {

KVCacheShape small_shape() {
  KVCacheShape s;
  s.num_layers = 2;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.page_size = 4;
  s.num_pages = 16;
  return s;
}

// Digest of one (page, head) recomputed from the stored keys.
void expect_digest_fresh(const PagedKVCache& c, int layer, const PageTable& t, int page_index) {
  const KVCacheShape& s = c.shape();
  KVLayerView v = c.layer(layer);
  int32_t page = t.pages[size_t(page_index)];
  int first = page_index * s.page_size;
  int n = std::min(s.page_size, t.length - first);
  for (int h = 0; h < s.num_kv_heads; ++h)
    for (int i = 0; i < s.head_dim; ++i) {
      float mn = INFINITY, mx = -INFINITY;
      for (int j = 0; j < n; ++j) {
        float k = c.key(layer, t, first + j, h)[i];
        mn = std::min(mn, k);
        mx = std::max(mx, k);
      }
      size_t at = (size_t(page) * s.num_kv_heads + h) * s.head_dim + i;
      EXPECT_EQ(v.kmin[at], mn);
      EXPECT_EQ(v.kmax[at], mx);
    }
}

TEST(PagedKVCache, WriteReadAndDigests) {
  PagedKVCache c(small_shape());
  const auto& s = c.shape();
  PageTable t;
  t.length = 11;
  c.reserve(t, t.length);
  EXPECT_EQ(t.pages.size(), 3u);
  std::vector<std::vector<float>> ks;
  for (int pos = 0; pos < t.length; ++pos) {
    auto k = test::random_vector(size_t(s.num_kv_heads) * s.head_dim);
    auto v = test::random_vector(size_t(s.num_kv_heads) * s.head_dim);
    for (int l = 0; l < s.num_layers; ++l) c.write(l, t, pos, k.data(), v.data());
    ks.push_back(k);
  }
  for (int pos = 0; pos < t.length; ++pos)
    for (int h = 0; h < s.num_kv_heads; ++h)
      EXPECT_EQ(c.key(1, t, pos, h)[3], ks[size_t(pos)][size_t(h) * s.head_dim + 3]);
  for (int p = 0; p < 3; ++p) expect_digest_fresh(c, 0, t, p);
}

TEST(PagedKVCache, OverwriteKeepsDigestExact) {
  PagedKVCache c(small_shape());
  const auto& s = c.shape();
  PageTable t;
  t.length = 8;
  c.reserve(t, t.length);
  for (int pos = 0; pos < t.length; ++pos) {
    auto k = test::random_vector(size_t(s.num_kv_heads) * s.head_dim, 10.0f);
    for (int l = 0; l < s.num_layers; ++l) c.write(l, t, pos, k.data(), k.data());
  }
  // Overwrite with small values: a stale extreme must not survive in the digest.
  for (int pos : {1, 5, 6}) {
    auto k = test::random_vector(size_t(s.num_kv_heads) * s.head_dim, 0.01f);
    c.write(0, t, pos, k.data(), k.data());
  }
  expect_digest_fresh(c, 0, t, 0);
  expect_digest_fresh(c, 0, t, 1);
}

TEST(PagedKVCache, FullPoolIsAClearError) {
  PagedKVCache c(small_shape());
  PageTable a, b;
  c.reserve(a, 60);
  try {
    c.reserve(b, 8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache full"), std::string::npos);
  }
  c.release(a);
  EXPECT_EQ(c.free_pages(), 16);
  c.reserve(b, 8);
}

TEST(PagedKVCache, ShrinkReturnsWholePagesOnly) {
  PagedKVCache c(small_shape());
  PageTable a;
  c.reserve(a, 14);  // 4 pages of 4
  a.length = 14;
  c.shrink(a, 8);
  EXPECT_EQ(a.length, 8);
  EXPECT_EQ(a.pages.size(), 2u);
  EXPECT_EQ(c.free_pages(), 14);
  EXPECT_THROW(c.shrink(a, 6), Error);   // not a page boundary: a digest would keep stale keys
  EXPECT_THROW(c.shrink(a, 12), Error);  // longer than the table
  c.shrink(a, 0);
  EXPECT_TRUE(a.pages.empty());
  EXPECT_EQ(c.free_pages(), 16);
}

}  // namespace
}  // namespace skim
