// RetroAttention's decode stages on the CPU against their definitions: retro_page_plan's past
// rows attend, per head, exactly the pages their unit's RetroMask (Algorithm 2, held to
// equation (7) in retro_test.cpp) returns a value below their step for, in the newest row's
// list order; the newest row keeps its base list; a dense layer changes nothing. retro_merge
// caches the newest row's state and merges a past row's into its cached one.
#include <gtest/gtest.h>

#include <set>

#include "../shuffled_pages.h"
#include "../test_random.h"
#include "attention/retro_mask.h"
#include "attention/attention_state.h"
#include "backend/cpu/retro_decode.h"

namespace skim {
namespace {

TEST(RetroPagePlan, PastRowsAttendWhatTheirUnitsMaskLeavesUnseen) {
  for (bool per_head : {true, false}) {
    const int ps = 16, hkv = 2, group = 3, heads = hkv * group, w = test::random_int(2, 5), units = per_head ? heads : hkv;
    const int first_len = test::random_int(200, 400), steps = 12;
    const test::ShuffledPages pages = test::shuffled_pages({first_len + steps}, ps, 1, 1, test::rng());
    const int stride = pages.stride;
    std::vector<int32_t> a(size_t(units) * stride, kRetroNever);  // one slot
    std::vector<RetroMask> oracle(static_cast<size_t>(units));
    for (int t = 0; t < steps; ++t) {
      const int len = first_len + t + 1, m = (len + ps - 1) / ps;
      const int past = std::min(w - 1, t), n = past + 1;  // rows: the past ones (oldest first), then the newest
      // The base's selection of the newest row: per unit a random subset with the current page.
      std::vector<std::set<int>> chosen(static_cast<size_t>(units));
      for (auto& c : chosen) {
        c.insert(m - 1);
        for (int i = 0; i < m - 1; ++i)
          if (test::random_int(0, 3) == 0) c.insert(i);
      }
      std::vector<int32_t> base_table(size_t(n) * hkv * stride, -7), base_lens(size_t(n) * hkv, 0);
      std::vector<uint32_t> base_masks(base_table.size(), 0u);
      for (int h = 0; h < hkv; ++h) {
        const size_t list = size_t(n - 1) * hkv + h;
        int k = 0;
        for (int i = 0; i < m; ++i) {
          uint32_t mask = 0;
          for (int g = 0; g < group; ++g) mask |= uint32_t(chosen[size_t(per_head ? h * group + g : h)].count(i)) << g;
          if (!mask) continue;
          base_table[list * stride + k] = pages.table[size_t(i)];
          base_masks[list * stride + k] = mask;
          base_lens[list] += i + 1 < m ? ps : len - i * ps;
          ++k;
        }
      }
      std::vector<int32_t> tables, lens, slots, retro_steps, newest;
      for (int r = 0; r < n; ++r) {
        tables.insert(tables.end(), pages.table.begin(), pages.table.begin() + stride);
        lens.push_back(len - (n - 1 - r));
        slots.push_back(0);
        retro_steps.push_back(t - (n - 1 - r));
        newest.push_back(n - 1);
      }
      std::vector<int32_t> out_table(base_table.size(), -7), out_lens(base_lens.size(), -7);
      std::vector<uint8_t> age(base_table.size() * group);
      std::vector<uint32_t> out_masks(base_table.size(), 0u);
      cpu::retro_page_plan({.batch = n, .num_heads = heads, .num_kv_heads = hkv, .page_size = ps,
                            .max_pages_per_seq = stride, .per_head_units = per_head, .sparse = true,
                            .page_table = tables.data(), .seq_lens = lens.data(), .base_table = base_table.data(),
                            .base_lens = base_lens.data(), .base_masks = per_head ? base_masks.data() : nullptr,
                            .row_slot = slots.data(), .retro_step = retro_steps.data(), .newest_row = newest.data(),
                            .masks = {.a = a.data(), .units = units, .stride = stride}, .age = age.data(),
                            .out_table = out_table.data(), .out_lens = out_lens.data(), .out_masks = out_masks.data()});
      // The oracle: each unit's mask updated with its chosen pages in the newest list's order.
      std::vector<std::vector<int32_t>> values(static_cast<size_t>(units));
      std::vector<std::vector<int>> order(static_cast<size_t>(units));
      for (int un = 0; un < units; ++un) {
        order[size_t(un)].assign(chosen[size_t(un)].begin(), chosen[size_t(un)].end());
        oracle[size_t(un)].update(t, m - 1, order[size_t(un)], values[size_t(un)]);
      }
      for (int h = 0; h < hkv; ++h) {
        const size_t nl = size_t(n - 1) * hkv + h;
        EXPECT_EQ(out_lens[nl], base_lens[nl]) << "the newest row keeps its base list";
        for (int r = 0; r < n - 1; ++r) {
          const int u = retro_steps[size_t(r)];
          std::vector<std::set<int>> want(static_cast<size_t>(group)), got(static_cast<size_t>(group));
          for (int g = 0; g < group; ++g) {
            const int un = per_head ? h * group + g : h;
            for (size_t k = 0; k < order[size_t(un)].size(); ++k)
              if (values[size_t(un)][k] < u) want[size_t(g)].insert(order[size_t(un)][k]);
          }
          const size_t list = size_t(r) * hkv + h;
          ASSERT_EQ(out_lens[list] % ps, 0) << "whole pages";
          for (int k = 0; k * ps < out_lens[list]; ++k) {
            const int32_t page = out_table[list * stride + k];
            const int i = int(std::find(pages.table.begin(), pages.table.end(), page) - pages.table.begin());
            for (int g = 0; g < group; ++g)
              if (out_masks[list * stride + k] >> g & 1u) got[size_t(g)].insert(i);
          }
          for (int g = 0; g < group; ++g)
            EXPECT_EQ(got[size_t(g)], want[size_t(g)]) << "step " << t << " past step " << u << " head " << g;
        }
      }
    }
  }
}

TEST(RetroMerge, CachesTheNewestAndMergesThePast) {
  const int heads = 2, d = 8, w1 = 3;
  // Rows: a past row of step 4 and the newest of step 5, one slot.
  std::vector<float> o = test::random_vector(size_t(2) * heads * d), lse = test::random_vector(size_t(2) * heads);
  std::vector<float> cache_o = test::random_vector(size_t(w1) * heads * d), cache_lse = test::random_vector(size_t(w1) * heads);
  std::vector<int32_t> cache_step = {3, 4, kRetroNever};  // entries step % 3: 3 -> 0, 4 -> 1
  const std::vector<float> before_o = cache_o, before_lse = cache_lse;
  const std::vector<int32_t> slots = {0, 0}, steps = {4, 5}, newest = {1, 1};
  std::vector<float> out(o.size());
  cpu::retro_merge({.batch = 2, .num_heads = heads, .head_dim = d, .o = o.data(), .lse = lse.data(), .out = out.data(),
                    .row_slot = slots.data(), .retro_step = steps.data(), .newest_row = newest.data(),
                    .cache = {.entries = w1, .o = cache_o.data(), .lse = cache_lse.data(), .step = cache_step.data()}});
  for (int h = 0; h < heads; ++h) {
    std::vector<float> want(before_o.begin() + (1 * heads + h) * d, before_o.begin() + (1 * heads + h + 1) * d);
    float wl = before_lse[size_t(1 * heads + h)];
    merge_state(want.data(), wl, o.data() + size_t(h) * d, lse[size_t(h)], d);
    for (int i = 0; i < d; ++i) {
      EXPECT_FLOAT_EQ(out[size_t(h) * d + i], want[size_t(i)]) << "the past row: cached + new";
      EXPECT_FLOAT_EQ(cache_o[size_t(1 * heads + h) * d + i], want[size_t(i)]) << "and cached so";
      EXPECT_EQ(out[size_t(heads + h) * d + i], o[size_t(heads + h) * d + i]) << "the newest row: its own state";
      EXPECT_EQ(cache_o[size_t(2 * heads + h) * d + i], o[size_t(heads + h) * d + i]) << "cached at 5 % 3";
    }
  }
  EXPECT_EQ(cache_step, (std::vector<int32_t>{3, 4, 5}));
  std::vector<int32_t> bad_step = {0, 0};
  EXPECT_THROW(cpu::retro_merge({.batch = 2, .num_heads = heads, .head_dim = d, .o = o.data(), .lse = lse.data(),
                                 .out = out.data(), .row_slot = slots.data(), .retro_step = bad_step.data(),
                                 .newest_row = std::vector<int32_t>{1, 1}.data(),
                                 .cache = {.entries = w1, .o = cache_o.data(), .lse = cache_lse.data(),
                                           .step = std::vector<int32_t>{7, 7, 7}.data()}}),
               std::invalid_argument);
}

// The GPU's folded step (RetroPagePlanArgs::folded_q, RetroMergeArgs::fold_group): which steps
// fold, and where a row's state sits in the folded layout. Every (row, head) of a batch mixing a
// sequence with a past row, one without, and a row of another policy has its own state; a
// sequence's newest and past rows fill its newest row's 2 x num_heads states, the past row's heads
// of a KV head right after the newest row's. (The GPU test CudaRetroFold runs the step itself.)
TEST(RetroFold, FitsAndLaysOutTheStates) {
  EXPECT_TRUE(retro_fold_fits(2, 4));   // the 8B shape and the demo model: 8 heads a KV head
  EXPECT_TRUE(retro_fold_fits(2, 3));   // SmolLM2
  EXPECT_TRUE(retro_fold_fits(1, 4));
  EXPECT_FALSE(retro_fold_fits(3, 2));  // two past rows
  EXPECT_FALSE(retro_fold_fits(2, 5));  // ten heads: more than the MMA tile's 8 rows
  const int heads = 6, group = 3;
  // Rows: a past row (0) and its newest (1); a newest row with no past row yet (2); another policy (3).
  const std::vector<int32_t> slot = {0, 0, 1, -1}, newest = {1, 1, 2, 3};
  RetroMergeArgs m{.batch = 4, .num_heads = heads, .head_dim = 64, .row_slot = slot.data(), .newest_row = newest.data(),
                   .cache = {}};
  EXPECT_EQ(m.state_of(2, 5, false), size_t(2 * heads + 5));  // unfolded: [batch][num_heads]
  m.fold_group = group;
  std::set<size_t> states;
  for (int b = 0; b < 4; ++b)
    for (int h = 0; h < heads; ++h) {
      const bool past = slot[size_t(b)] >= 0 && newest[size_t(b)] != b;
      const size_t s = m.state_of(b, h, past);
      EXPECT_TRUE(states.insert(s).second) << "row " << b << " head " << h;
      EXPECT_EQ(s / (2 * heads), size_t(past ? newest[size_t(b)] : b)) << "row " << b << " head " << h;
      EXPECT_EQ(s % (2 * heads), size_t(h / group * 2 * group + (past ? group : 0) + h % group));
    }
  for (size_t s = 2 * heads; s < 4 * heads; ++s) EXPECT_TRUE(states.count(s)) << "the sequence's states, " << s;
  // row_of_state inverts state_of on every state a row reads, and names no row for the others.
  for (int fold : {0, group}) {
    m.fold_group = fold;
    for (size_t s = 0; s < size_t(4 * heads * (fold ? 2 : 1)); ++s) {
      int b = -1, h = -1;
      const bool read = m.row_of_state(s, b, h);
      EXPECT_EQ(read, !fold || states.count(s) > 0) << "fold " << fold << ", state " << s;
      if (!read) continue;
      const bool past = slot[size_t(b)] >= 0 && newest[size_t(b)] != b;
      EXPECT_EQ(m.state_of(b, h, past), s) << "fold " << fold << ", row " << b << " head " << h;
    }
  }
}

}  // namespace
}  // namespace skim
