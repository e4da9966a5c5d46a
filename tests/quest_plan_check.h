// The definition of Quest's page plan (attention/quest_page_select_args.h), checked on the
// output of cpu::quest_page_select and of the CUDA kernel: per query head the n best pages by
// the bound recomputed in double (every kept page scoring at least every dropped one, up to
// float rounding: the GPU's sums may order near-ties differently), the newest page forced in;
// per KV head the union in position order, each mask bit exactly that head's pages.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "attention/quest_page_select_args.h"
#include "core/dtype.h"

namespace skim::test {

// `seq_table` the sequences' page tables (a.page_table's host copy); table/masks/lens the
// output. a's pointers q, kmin, kmax, seq_lens are host pointers.
inline void check_quest_plan(const QuestPageSelectArgs& a, const std::vector<int32_t>& seq_table,
                             const std::vector<int32_t>& table, const std::vector<uint32_t>& masks,
                             const std::vector<int32_t>& lens) {
  const int ps = a.page_size, d = a.head_dim, hkv = a.num_kv_heads, heads = a.num_heads, group = a.group_size();
  const int batch = a.batch, stride = a.max_pages_per_seq;
  for (int b = 0; b < batch; ++b) {
    const int ctx = a.seq_lens[b], m = (ctx + ps - 1) / ps;
    const int n = std::min(m, std::max(1, (quest_budget_tokens(a.budget, a.min_tokens, ctx) + ps - 1) / ps));
    for (int h = 0; h < hkv; ++h) {
      SCOPED_TRACE(::testing::Message() << "sequence " << b << ", KV head " << h);
      const size_t list = size_t(b) * hkv + h;
      // The listed pages as indices into the sequence, and each head's.
      std::vector<int> listed;
      std::vector<std::set<int>> kept(static_cast<size_t>(group));
      for (int i = 0; i < (lens[list] + ps - 1) / ps; ++i) {
        const int32_t id = table[list * stride + i];
        const auto begin = seq_table.begin() + long(b) * stride;
        const int p = int(std::find(begin, begin + m, id) - begin);
        ASSERT_LT(p, m) << "page id " << id << " is not the sequence's";
        ASSERT_NE(masks[list * stride + i], 0u) << "a listed page no head keeps";
        listed.push_back(p);
        for (int g = 0; g < group; ++g)
          if (masks[list * stride + i] >> g & 1u) kept[size_t(g)].insert(p);
      }
      ASSERT_TRUE(std::is_sorted(listed.begin(), listed.end()));
      ASSERT_EQ(std::adjacent_find(listed.begin(), listed.end()), listed.end());
      if (m == 0) {
        EXPECT_EQ(lens[list], 0);
        continue;
      }
      EXPECT_EQ(listed.back(), m - 1) << "the newest page is not last";
      EXPECT_EQ(lens[list], (int(listed.size()) - 1) * ps + ctx - (m - 1) * ps);
      for (int g = 0; g < group; ++g) {
        const int hq = h * group + g;
        ASSERT_EQ(int(kept[size_t(g)].size()), n) << "head " << g;
        EXPECT_TRUE(kept[size_t(g)].count(m - 1)) << "head " << g << " dropped the newest page";
        // Kept pages score at least every dropped one (the definition, in double).
        double worst_kept = INFINITY, best_dropped = -INFINITY;
        for (int p = 0; p < m - 1; ++p) {
          const size_t off = (size_t(seq_table[size_t(b) * stride + p]) * hkv + h) * d;
          double s = 0;
          for (int i = 0; i < d; ++i) {
            const double qi = bf16_to_f32(a.q[(size_t(b) * heads + hq) * d + i]);
            s += std::max(qi * bf16_to_f32(a.kmin[off + i]), qi * bf16_to_f32(a.kmax[off + i]));
          }
          if (kept[size_t(g)].count(p)) worst_kept = std::min(worst_kept, s);
          else best_dropped = std::max(best_dropped, s);
        }
        EXPECT_GE(worst_kept, best_dropped - 1e-4 * (1 + std::fabs(best_dropped))) << "head " << g;
      }
    }
  }
}

}  // namespace skim::test
