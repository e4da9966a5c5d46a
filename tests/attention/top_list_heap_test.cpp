// top_list::Heap (attention/top_list_heap.h), the bounded min-heap of CSAttention's centroid
// lists that the CPU and the GPU insert share: its sift-down, which keeps the moving entry in
// registers and moves children up into the hole, leaves the same array as sifting by swaps (the
// plain form, written here), over random heaps with many tied scores, every start position; and
// a stream of offers keeps the heap property and the best scores.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "../test_random.h"
#include "attention/top_list_heap.h"

namespace skim {
namespace {

// Sift-down by swaps: the definition the heap's form must equal.
void sift_down_by_swaps(const top_list::Heap& h, size_t i) {
  const size_t n = size_t(*h.size);
  for (;;) {
    size_t least = i;
    for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < n; ++c)
      if (h.below(c, least)) least = c;
    if (least == i) return;
    h.swap(i, least);
    i = least;
  }
}

TEST(TopListHeap, SiftDownMovesAsSwapsDo) {
  auto& rng = test::rng();
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + int(rng() % 70);
    std::vector<int32_t> index(static_cast<size_t>(n));
    std::vector<uint16_t> score(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
      index[size_t(j)] = int32_t(rng() % 50);             // repeated indices too
      score[size_t(j)] = uint16_t(0x3c00 + rng() % 6) ^ uint16_t(rng() % 2 ? 0x8000 : 0);  // few, signed
    }
    const size_t start = rng() % size_t(n);
    std::vector<int32_t> index2 = index;
    std::vector<uint16_t> score2 = score;
    int32_t size = n, size2 = n;
    const top_list::Heap a{index.data(), score.data(), &size, n}, b{index2.data(), score2.data(), &size2, n};
    a.sift_down(start);
    sift_down_by_swaps(b, start);
    ASSERT_EQ(index, index2) << "trial " << trial << ", n " << n << ", from " << start;
    ASSERT_EQ(score, score2) << "trial " << trial;
  }
}

TEST(TopListHeap, OffersKeepTheBestScoresInHeapOrder) {
  auto& rng = test::rng();
  const int capacity = 37;
  std::vector<int32_t> index(capacity);
  std::vector<uint16_t> score(capacity);
  int32_t size = 0;
  const top_list::Heap h{index.data(), score.data(), &size, capacity};
  std::vector<std::pair<int, int32_t>> offered;  // (order key, key)
  for (int32_t key = 0; key < 3000; ++key) {
    const uint16_t s = uint16_t(0x3000 + rng() % 200);
    h.offer(key, s);
    offered.push_back({top_list::order_key(s), key});
  }
  ASSERT_EQ(size, capacity);
  for (int j = 1; j < capacity; ++j) EXPECT_FALSE(h.below(size_t(j), size_t((j - 1) / 2))) << "heap order at " << j;
  // The kept: the best scores, an earlier arrival kept over a later one of the same score.
  std::sort(offered.begin(), offered.end(), [](auto& x, auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
  std::vector<int32_t> want, got(index.begin(), index.end());
  for (int j = 0; j < capacity; ++j) want.push_back(offered[size_t(j)].second);
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace skim
