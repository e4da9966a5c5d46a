// rows_first (model/forward.h): a batch's marked rows moved to the front for a backend that runs
// them apart (the GPU's cs rows), every per-row field moved with its row, and the logits rows
// renumbered so that the logits still come out in the order asked.
#include <gtest/gtest.h>

#include <vector>

#include "kv/page_pool.h"
#include "model/forward.h"

namespace skim {
namespace {

// Rows r = 0..4 of five sequences: token 100 + r, position 10 * r, policy r % 2 + 1, retro step r.
ForwardBatch five_rows(std::vector<PageTable>& tables) {
  ForwardBatch b;
  b.decode = true;
  for (int r = 0; r < 5; ++r) {
    b.tokens.push_back(100 + r);
    b.positions.push_back(10 * r);
    b.tables.push_back(&tables[size_t(r)]);
    b.policy.push_back(r % 2 + 1);
    b.retro_step.push_back(r);
  }
  b.logits_rows = {4, 0, 3};
  return b;
}

TEST(RowsFirst, MovesTheMarkedRowsFirstWithTheirFieldsAndLogitsRows) {
  std::vector<PageTable> tables(5);
  const ForwardBatch b = five_rows(tables);
  ForwardBatch o;
  bool moved = false;
  EXPECT_EQ(rows_first(b, {false, true, false, true, false}, o, moved), 2);
  ASSERT_TRUE(moved);
  const std::vector<int> order = {1, 3, 0, 2, 4};  // the marked rows in order, then the others
  ASSERT_EQ(o.tokens.size(), 5u);
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t r = size_t(order[i]);
    EXPECT_EQ(o.tokens[i], b.tokens[r]);
    EXPECT_EQ(o.positions[i], b.positions[r]);
    EXPECT_EQ(o.tables[i], b.tables[r]);
    EXPECT_EQ(o.policy[i], b.policy[r]);
    EXPECT_EQ(o.retro_step[i], b.retro_step[r]);
  }
  EXPECT_TRUE(o.decode);
  // The logits asked of rows 4, 0, 3 come from where those rows went, in that order.
  EXPECT_EQ(o.logits_rows, (std::vector<int>{4, 2, 1}));
}

TEST(RowsFirst, LeavesABatchWhoseMarkedRowsLeadAsItIs) {
  std::vector<PageTable> tables(5);
  ForwardBatch b = five_rows(tables);
  b.retro_step.clear();
  b.policy.clear();
  ForwardBatch o;
  o.tokens = {7};  // untouched when nothing moves
  bool moved = true;
  EXPECT_EQ(rows_first(b, {true, true, false, false, false}, o, moved), 2);
  EXPECT_FALSE(moved);
  EXPECT_EQ(o.tokens, std::vector<int32_t>{7});
  EXPECT_EQ(rows_first(b, std::vector<bool>(5, false), o, moved), 0);
  EXPECT_FALSE(moved);
  EXPECT_EQ(rows_first(b, std::vector<bool>(5, true), o, moved), 5);
  EXPECT_FALSE(moved);
  // Empty per-row fields stay empty when rows move.
  EXPECT_EQ(rows_first(b, {false, false, false, false, true}, o, moved), 1);
  ASSERT_TRUE(moved);
  EXPECT_TRUE(o.policy.empty());
  EXPECT_TRUE(o.retro_step.empty());
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{104, 100, 101, 102, 103}));
}

TEST(RowsFirst, RefusesMarksOfAnotherLength) {
  std::vector<PageTable> tables(5);
  ForwardBatch o;
  bool moved = false;
  EXPECT_THROW(rows_first(five_rows(tables), {true}, o, moved), Error);
}

}  // namespace
}  // namespace skim
