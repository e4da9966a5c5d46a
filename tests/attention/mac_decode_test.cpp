// MAC's decode stages on the CPU against their definitions (attention/mac_decode_args.h): the
// page plan lists, per (row, KV head), the union of its heads' pages in position order cut at
// the row's prefix end, each head's bit set on exactly its pages (a hit's band+tail, a miss's
// base pages); the merge gives the cached prefix + below and that + above.
#include <gtest/gtest.h>

#include <set>

#include "../mac_plan_case.h"
#include "backend/cpu/attention_state.h"
#include "backend/cpu/mac_decode.h"

namespace skim {
namespace {

using test::MacPlanCase;

struct PlanOut {
  std::vector<int32_t> below, above, below_lens, above_lens;
  std::vector<uint32_t> below_masks, above_masks;
  explicit PlanOut(const MacPlanCase& c)
      : below(c.slots(), -7), above(c.slots(), -7), below_lens(c.lists(), -7), above_lens(c.lists(), -7),
        below_masks(c.slots(), 0xdeadbeefu), above_masks(c.slots(), 0xdeadbeefu) {}
};

PlanOut run_plan(const MacPlanCase& c) {
  PlanOut p(c);
  MacPagePlanArgs a = c.args();
  a.page_table = c.pages.table.data();
  a.seq_lens = c.lens.data();
  a.base_table = c.base_table.data();
  a.base_lens = c.base_lens.data();
  a.base_masks = c.masked ? c.base_masks.data() : nullptr;
  a.band_begin = c.band_begin.data();
  a.below_table = p.below.data();
  a.below_lens = p.below_lens.data();
  a.below_masks = p.below_masks.data();
  a.above_table = p.above.data();
  a.above_lens = p.above_lens.data();
  a.above_masks = p.above_masks.data();
  cpu::mac_page_plan(a);
  return p;
}

// Head g's pages (as indices into its row's table) by the definition.
std::set<int> head_pages(const MacPlanCase& c, int b, int kvh, int g) {
  const int m = c.pages.pages_of(c.lens[size_t(b)], c.page_size);
  const int begin = c.band_begin[size_t(b) * c.heads() + kvh * c.group + g];
  std::set<int> s;
  if (begin >= 0) {
    for (int i = begin / c.page_size; i < m; ++i) s.insert(i);
    return s;
  }
  const size_t list = size_t(b) * (c.per_kv_head ? c.kv_heads : 1) + (c.per_kv_head ? kvh : 0);
  for (int j = 0; j * c.page_size < c.base_lens[list]; ++j) {
    if (c.masked && !(c.base_masks[list * c.pages.stride + j] >> g & 1u)) continue;
    const int32_t page = c.base_table[list * c.pages.stride + j];
    for (int i = 0; i < m; ++i)
      if (c.pages.table[size_t(b) * c.pages.stride + i] == page) s.insert(i);
  }
  return s;
}

void expect_list(const MacPlanCase& c, int b, int kvh, const std::vector<int32_t>& table,
                 const std::vector<uint32_t>& masks, int32_t len, bool below, const char* what) {
  const int m = c.pages.pages_of(c.lens[size_t(b)], c.page_size);
  const int split = mac_prefix_end(c.lens[size_t(b)] - 1, c.band, c.page_size) / c.page_size;
  std::vector<std::set<int>> want(static_cast<size_t>(c.group));
  std::set<int> uni;
  for (int g = 0; g < c.group; ++g)
    for (int i : head_pages(c, b, kvh, g))
      if ((i < split) == below) {
        want[size_t(g)].insert(i);
        uni.insert(i);
      }
  const size_t list = size_t(b) * c.kv_heads + kvh;
  int tokens = 0, n = 0;
  for (int i : uni) {
    ASSERT_EQ(table[list * c.pages.stride + n], c.pages.table[size_t(b) * c.pages.stride + i])
        << what << ": row " << b << " KV head " << kvh << ", listed page " << n;
    for (int g = 0; g < c.group; ++g)
      EXPECT_EQ(masks[list * c.pages.stride + n] >> g & 1u, uint32_t(want[size_t(g)].count(i)))
          << what << ": row " << b << " head " << g << " page " << i;
    tokens += i + 1 < m ? c.page_size : c.lens[size_t(b)] - i * c.page_size;
    ++n;
  }
  EXPECT_EQ(len, tokens) << what << ": row " << b << " KV head " << kvh;
  EXPECT_EQ(table[list * c.pages.stride + n], -7) << what << ": a slot past the list was written";
}

TEST(MacPagePlan, EachHeadAttendsItsBandOrItsBasePagesCutAtThePrefixEnd) {
  for (int trial = 0; trial < 12; ++trial) {
    const bool per_head = trial % 3 != 0, masked = trial % 3 == 2;
    const MacPlanCase c(test::random_int(1, 3), test::random_int(1, 5), test::random_int(0, 600), per_head, masked,
                        {test::random_int(1, 900), test::random_int(1, 40), test::random_int(1, 2000), 16, 1, 257});
    const PlanOut p = run_plan(c);
    for (int b = 0; b < c.batch(); ++b)
      for (int h = 0; h < c.kv_heads; ++h) {
        const size_t list = size_t(b) * c.kv_heads + h;
        expect_list(c, b, h, p.below, p.below_masks, p.below_lens[list], true, "below");
        expect_list(c, b, h, p.above, p.above_masks, p.above_lens[list], false, "above");
        EXPECT_EQ(p.below_lens[list] % c.page_size, 0) << "below the prefix end every page is full";
      }
  }
}

TEST(MacPagePlan, RefusesABandOffAPageBoundary) {
  MacPlanCase c(1, 2, 64, false, false, {300});
  c.band_begin[0] = 17;
  EXPECT_THROW(run_plan(c), std::invalid_argument);
}

TEST(MacMergeStates, CachesPrefixPlusBelowAndOutputsThatPlusAbove) {
  const int batch = 2, heads = 3, d = 8, n = batch * heads;
  std::vector<float> bo = test::random_vector(size_t(n) * d), ao = test::random_vector(size_t(n) * d);
  std::vector<float> co = test::random_vector(size_t(n) * d), bl = test::random_vector(size_t(n));
  std::vector<float> al = test::random_vector(size_t(n)), cl = test::random_vector(size_t(n));
  cl[1] = kEmptyLse;  // a miss: no reused prefix
  bl[2] = kEmptyLse;  // a head with nothing below the prefix end
  al[3] = kEmptyLse;
  std::vector<float> want_c = co, want_cl = cl, want_o(size_t(n) * d);
  for (int i = 0; i < n; ++i) {
    if (cl[size_t(i)] == kEmptyLse) std::fill_n(want_c.begin() + i * d, d, 0.0f);
    merge_state(want_c.data() + i * d, want_cl[size_t(i)], bo.data() + i * d, bl[size_t(i)], d);
    std::copy_n(want_c.begin() + i * d, d, want_o.begin() + i * d);
    float l = want_cl[size_t(i)];
    merge_state(want_o.data() + i * d, l, ao.data() + i * d, al[size_t(i)], d);
  }
  for (int i = 0; i < n; ++i)
    if (cl[size_t(i)] == kEmptyLse) std::fill_n(co.begin() + i * d, d, 0.0f);
  std::vector<float> out(size_t(n) * d);
  cpu::mac_merge_states({.batch = batch, .num_heads = heads, .head_dim = d, .below_o = bo.data(), .below_lse = bl.data(),
                         .above_o = ao.data(), .above_lse = al.data(), .cache_o = co.data(), .cache_lse = cl.data(),
                         .out = out.data()});
  EXPECT_EQ(co, want_c);
  EXPECT_EQ(cl, want_cl);
  EXPECT_EQ(out, want_o);
}

}  // namespace
}  // namespace skim
