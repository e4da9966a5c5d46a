// The selection locality meter (eval/selection_locality.h) against hand-counted selections: the
// chosen keys and the pages holding them (the union of a group's heads), the overlap with the
// step before, and LRU caches of 1x, 1.5x and 2x the first step's pages; and on a real policy
// (streaming: its window slides one key a step) the overlap its definition gives.
#include "eval/selection_locality.h"

#include <gtest/gtest.h>

#include "../attention/decode_harness.h"

namespace skim::eval {
namespace {

// A one-row decode batch at `position` (the meter reads the page size, the row's table, the
// layer and the position).
struct Row {
  PageTable table;
  std::vector<const PageTable*> tables{&table};
  std::vector<int32_t> pos{0};
  AttentionBatch batch(int position, int layer) {
    AttentionBatch b;
    b.num_rows = 1;
    b.kv.page_size = 16;
    b.layer = layer;
    pos[0] = position;
    b.positions = pos.data();
    b.tables = tables.data();
    return b;
  }
};

TEST(SelectionLocality, CountsKeysPagesOverlapAndCacheHits) {
  Row row;
  SelectionLocalityMeter m;
  // Step 1: two heads choose [0, 32) between them and [80, 88): 40 keys in pages 0, 1 and 5.
  m.on_selection(row.batch(199, 0), 0, 0, {{{0, 20}, {80, 88}}, {{10, 32}}});
  // Step 2: pages 1, 5, 6: 2 of 3 were chosen before; the 1x cache (3 pages) holds both.
  m.on_selection(row.batch(200, 0), 0, 0, {{{16, 20}, {85, 100}}});
  const LocalityStats& s = m.stats();
  EXPECT_EQ(s.lists, 2.0);
  EXPECT_DOUBLE_EQ(s.keys, 40 + 4 + 15);
  EXPECT_DOUBLE_EQ(s.pages, 3 + 3);
  EXPECT_DOUBLE_EQ(s.page_keys, 16.0 * 6);
  EXPECT_DOUBLE_EQ(s.context_pages, 13 + 13);  // 200 and 201 keys
  EXPECT_EQ(s.repeats, 1.0);
  EXPECT_DOUBLE_EQ(s.overlap, 2.0 / 3.0);
  for (size_t i = 0; i < kLocalityCacheSizes.size(); ++i) {  // the first step only fills them
    EXPECT_EQ(s.lookups[i], 3.0);
    EXPECT_EQ(s.hits[i], 2.0);
  }
  // Another layer is another list: its first step counts no overlap.
  m.on_selection(row.batch(200, 1), 0, 0, {{{0, 16}}});
  EXPECT_EQ(m.stats().repeats, 1.0);
}

// The 1x cache (2 pages after a first step of 2) evicts the least recently used: pages 0, 1;
// then 0 (a hit) and 2 (evicts 1); then 1 misses.
TEST(SelectionLocality, LruEvictsTheLeastRecentlyUsed) {
  Row row;
  SelectionLocalityMeter m;
  m.on_selection(row.batch(100, 0), 0, 0, {{{0, 32}}});            // pages 0, 1 (capacity 2 at 1x)
  m.on_selection(row.batch(101, 0), 0, 0, {{{0, 16}, {32, 48}}});  // page 0 hits, 2 evicts 1
  m.on_selection(row.batch(102, 0), 0, 0, {{{16, 32}}});           // page 1 misses
  EXPECT_EQ(m.stats().lookups[0], 3.0);
  EXPECT_EQ(m.stats().hits[0], 1.0);
}

// Prefetch from the layer before: layer 1's misses in its largest cache against layer 0's
// pages of the same step, its same KV head's and both KV heads'.
TEST(SelectionLocality, CountsWhatTheLayerBeforeWouldHaveCopiedAhead) {
  Row row;
  SelectionLocalityMeter m;
  const auto batch = [&](int position, int layer) {
    AttentionBatch b = row.batch(position, layer);
    b.num_kv_heads = 2;
    return b;
  };
  // Step 1: layer 0 chooses pages {0, 1} (head 0) and {7} (head 1); layer 1's head 0 {0, 2},
  // its first step: its 2x cache (4 pages) now holds 0 and 2, nothing counted.
  m.on_selection(batch(199, 0), 0, 0, {{{0, 32}}});
  m.on_selection(batch(199, 0), 0, 1, {{{112, 128}}});
  m.on_selection(batch(199, 1), 0, 0, {{{0, 16}, {32, 48}}});
  EXPECT_EQ(m.stats().ahead_lists[0], 0.0);
  // Step 2: layer 0 chooses {1, 3, 4} and {5}; layer 1's head 0 {0, 3, 5}: it misses 3 and 5.
  // The same head's guess copies 1, 3, 4 (none resident) of which 3 is read; both heads' copy
  // 1, 3, 4, 5 of which 3 and 5 are read.
  m.on_selection(batch(200, 0), 0, 0, {{{16, 32}, {48, 80}}});
  m.on_selection(batch(200, 0), 0, 1, {{{80, 96}}});
  m.on_selection(batch(200, 1), 0, 0, {{{0, 16}, {48, 64}, {80, 96}}});
  const LocalityStats& s = m.stats();
  EXPECT_EQ(s.ahead_lists[0], 1.0);
  EXPECT_EQ(s.ahead_misses[0], 2.0);
  EXPECT_EQ(s.ahead_lists[1], 1.0);
  EXPECT_EQ(s.ahead_misses[1], 2.0);
  EXPECT_EQ(s.ahead_lists[2], 0.0);  // no guessed queries
  EXPECT_EQ(s.ahead_copied[0], 3.0);
  EXPECT_EQ(s.ahead_useful[0], 1.0);
  EXPECT_EQ(s.ahead_copied[1], 4.0);
  EXPECT_EQ(s.ahead_useful[1], 2.0);
  // Merging adds the counts.
  LocalityStats merged;
  merged.merge(s);
  merged.merge(s);
  EXPECT_EQ(merged.ahead_useful[1], 4.0);
}

// A choice over guessed queries counts for the list of its layer and KV head in the same step
// only: layer 0's second step guesses pages {2, 3}; its 2x cache (2 pages) holds 0 and 1 from
// the first, the step chooses {1, 2}: one miss (2), hidden; 3 copied for nothing. A guess left
// from an earlier step is not counted.
TEST(SelectionLocality, CountsWhatAChoiceOverGuessedQueriesWouldHaveCopiedAhead) {
  Row row;
  SelectionLocalityMeter m;
  m.on_speculation(row.batch(99, 0), 0, 0, {{{0, 16}}});  // before the first step: not counted
  m.on_selection(row.batch(99, 0), 0, 0, {{{0, 16}}, {{16, 20}}});  // pages 0, 1; capacity 2x2 = 4
  m.on_speculation(row.batch(100, 0), 0, 0, {{{32, 64}}});
  m.on_selection(row.batch(100, 0), 0, 0, {{{16, 48}}});
  const LocalityStats& s = m.stats();
  EXPECT_EQ(s.ahead_lists[2], 1.0);
  EXPECT_EQ(s.ahead_misses[2], 1.0);
  EXPECT_EQ(s.ahead_copied[2], 2.0);
  EXPECT_EQ(s.ahead_useful[2], 1.0);
  m.on_selection(row.batch(101, 0), 0, 0, {{{48, 64}}});  // the step-2 guess is stale now
  EXPECT_EQ(m.stats().ahead_lists[2], 1.0);
  // Two guesses in a step count as the first and the second: {3} then {4}, the step chooses 4.
  m.on_speculation(row.batch(102, 0), 0, 0, {{{48, 64}}});
  m.on_speculation(row.batch(102, 0), 0, 0, {{{64, 80}}});
  m.on_selection(row.batch(102, 0), 0, 0, {{{64, 80}}});
  EXPECT_EQ(m.stats().ahead_lists[2], 2.0);
  EXPECT_EQ(m.stats().ahead_lists[3], 1.0);
  EXPECT_EQ(m.stats().ahead_useful[3], 1.0);
}

// Streaming's window slides one key a step: consecutive steps choose the same pages but where
// the window crosses a page boundary.
TEST(SelectionLocality, StreamingsWindowOverlapsNearlyWhole) {
  test::DecodeHarness h(1200, 1, 2, 16);
  auto policy = make_policy("streaming:sink=4,window=256");
  h.prefill(*policy, 1000);
  SelectionLocalityMeter m;
  m.attach(*policy);
  for (int i = 0; i < 64; ++i) h.step(*policy);
  SelectionLocalityMeter::detach(*policy);
  const LocalityStats& s = m.stats();
  ASSERT_EQ(s.lists, 64.0);
  EXPECT_GT(s.overlap / double(s.repeats), 0.9);
  EXPECT_NEAR(s.pages / double(s.lists), 1 + 17, 1.0);  // the sink page and the window's 16-17
  EXPECT_GT(double(s.hits[2]) / double(s.lookups[2]), 0.9);
}

}  // namespace
}  // namespace skim::eval
