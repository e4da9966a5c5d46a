// MAC's decode stages on the CPU against their definitions (attention/mac_decode_args.h): the
// page plan lists, per (row, KV head), the union of its heads' pages in position order cut at
// the row's prefix end, each head's bit set on exactly its pages (a hit's band+tail, a miss's
// base pages); the merge gives the cached prefix + below and that + above.
#include <gtest/gtest.h>

#include <set>

#include "../mac_plan_case.h"
#include "../mac_ring_case.h"
#include "attention/attention_state.h"
#include "backend/cpu/mac_decode.h"

namespace skim {
namespace {

using test::MacPlanCase;

struct PlanOut {
  std::vector<int32_t> below, above, below_lens, above_lens;
  std::vector<uint32_t> below_masks, above_masks, below_listed;
  explicit PlanOut(const MacPlanCase& c)
      : below(c.slots(), -7), above(c.slots(), -7), below_lens(c.lists(), -7), above_lens(c.lists(), -7),
        below_masks(c.slots(), 0xdeadbeefu), above_masks(c.slots(), 0xdeadbeefu), below_listed(c.lists(), 0xdeadbeefu) {}
};

PlanOut run_plan(const MacPlanCase& c, bool art_order = false) {
  PlanOut p(c);
  MacPagePlanArgs a = c.args();
  a.art_order = art_order;
  a.below_listed = p.below_listed.data();
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

// mac+art (art_order): `below` holds the same pages and masks in ART's order: first those a hit
// head attends, newest first, then the others in the base list's order (the base shuffled, as
// ART's visiting plans are); `above` as without it; below_listed the OR of below's masks.
TEST(MacPagePlan, ArtOrderListsTheHitsPagesNewestFirstThenTheBaseOrder) {
  for (int trial = 0; trial < 12; ++trial) {
    const bool per_head = trial % 3 != 0, masked = trial % 3 == 2;
    MacPlanCase c(test::random_int(1, 3), test::random_int(1, 5), test::random_int(0, 600), per_head, masked,
                  {test::random_int(1, 900), test::random_int(1, 40), test::random_int(1, 2000), 16, 1, 257});
    const PlanOut by_position = run_plan(c);
    c.shuffle_base();
    const PlanOut art = run_plan(c, true);
    EXPECT_EQ(art.above, by_position.above);
    EXPECT_EQ(art.above_masks, by_position.above_masks);
    EXPECT_EQ(art.above_lens, by_position.above_lens);
    EXPECT_EQ(art.below_lens, by_position.below_lens);
    for (int b = 0; b < c.batch(); ++b)
      for (int h = 0; h < c.kv_heads; ++h) {
        const size_t list = size_t(b) * c.kv_heads + h, at = list * c.pages.stride;
        const int n = art.below_lens[list] / c.page_size;
        const int32_t* table = c.pages.table.data() + size_t(b) * c.pages.stride;
        auto position = [&](int32_t page) { return int(std::find(table, table + c.pages.stride, page) - table); };
        uint32_t hits = 0;
        for (int g = 0; g < c.group; ++g) hits |= uint32_t(c.band_begin[size_t(b) * c.heads() + h * c.group + g] >= 0) << g;
        // The same (page, mask) pairs.
        std::vector<std::pair<int32_t, uint32_t>> want, got;
        uint32_t listed = 0;
        for (int k = 0; k < n; ++k) {
          want.push_back({by_position.below[at + k], by_position.below_masks[at + k]});
          got.push_back({art.below[at + k], art.below_masks[at + k]});
          listed |= art.below_masks[at + k];
        }
        EXPECT_EQ(art.below_listed[list], listed) << "row " << b << " KV head " << h;
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, want) << "row " << b << " KV head " << h;
        // The order: the hits' pages first, newest first; then the base list's order.
        int k = 0;
        for (; k < n && (art.below_masks[at + k] & hits); ++k) {
          if (k > 0) {
            EXPECT_GT(position(art.below[at + k - 1]), position(art.below[at + k])) << "row " << b;
          }
        }
        for (int rest = k; rest < n; ++rest) EXPECT_EQ(art.below_masks[at + rest] & hits, 0u) << "row " << b;
        const size_t base = size_t(b) * (c.per_kv_head ? c.kv_heads : 1) + (c.per_kv_head ? h : 0);
        const int32_t* base_list = c.base_table.data() + base * c.pages.stride;
        const int n_base = c.pages.pages_of(c.base_lens[base], c.page_size);
        int last = -1;
        for (; k < n; ++k) {
          const int j = int(std::find(base_list, base_list + n_base, art.below[at + k]) - base_list);
          ASSERT_LT(j, n_base) << "row " << b << ": a page below the hits' that the base does not list";
          EXPECT_GT(j, last) << "row " << b << ": out of the base list's order";
          last = j;
        }
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

// Rows outside PlanRows (another policy's) get their base list whole above, nothing below.
TEST(MacPagePlan, OtherPoliciesRowsPassThrough) {
  const MacPlanCase c(2, 3, 64, true, true, {700, 33, 1500});
  const std::vector<int32_t> row_policy = {0, 1, 0};
  PlanOut p(c);
  MacPagePlanArgs a = c.args();
  a.page_table = c.pages.table.data();
  a.seq_lens = c.lens.data();
  a.base_table = c.base_table.data();
  a.base_lens = c.base_lens.data();
  a.base_masks = c.base_masks.data();
  a.band_begin = c.band_begin.data();
  a.below_table = p.below.data();
  a.below_lens = p.below_lens.data();
  a.below_masks = p.below_masks.data();
  a.above_table = p.above.data();
  a.above_lens = p.above_lens.data();
  a.above_masks = p.above_masks.data();
  a.rows = PlanRows{row_policy.data(), 1u << 0};
  cpu::mac_page_plan(a);
  for (int h = 0; h < c.kv_heads; ++h) {
    const size_t list = size_t(1) * c.kv_heads + h;
    EXPECT_EQ(p.below_lens[list], 0);
    EXPECT_EQ(p.above_lens[list], c.base_lens[list]);
    for (int j = 0; j * c.page_size < c.base_lens[list]; ++j) {
      EXPECT_EQ(p.above[list * c.pages.stride + j], c.base_table[list * c.pages.stride + j]);
      EXPECT_EQ(p.above_masks[list * c.pages.stride + j], c.base_masks[list * c.pages.stride + j]);
    }
    expect_list(c, 0, h, p.below, p.below_masks, p.below_lens[size_t(h)], true, "below, row 0");
  }
}

// The GPU's match over bf16 rings (cpu::mac_match, the CUDA kernel's oracle) against its
// definition: a row with a ring and an active rule takes its nearest entry (a copied query is
// at distance 0), a hit below sqrt(2d)(1 - tau), its band starting at the entry's prefix end;
// the other rows miss. Every row's slot's fill gets its latest view as its step view.
TEST(MacMatch, NearestEntryByDefinition) {
  const test::MacRingCase c(5, 4, 64, 24);
  std::vector<int32_t> band(size_t(c.batch) * c.heads, 7), hit(band.size(), 7), fill = c.fill;
  for (int s = 0; s < c.slots; ++s) mac_fill_step(fill.data(), s)[0] = mac_fill_step(fill.data(), s)[1] = -5;
  unsigned long long bytes = 0;
  MacRingsView rings{.capacity = c.capacity, .q_pre = const_cast<uint16_t*>(c.ring_q.data()),
                     .o = const_cast<float*>(c.ring_o.data()), .lse = const_cast<float*>(c.ring_lse.data()),
                     .pos = const_cast<int32_t*>(c.pos.data()), .fill = fill.data()};
  cpu::mac_match({.batch = c.batch, .num_heads = c.heads, .head_dim = c.d, .page_size = c.page_size,
                  .q_pre = c.q_pre.data(), .positions = c.positions.data(), .row_slot = c.row_slot.data(),
                  .row_policy = c.row_policy.data(), .rules = c.rules.data(), .rings = rings, .band_begin = band.data(),
                  .hit_entry = hit.data(), .bytes = &bytes});
  int hits = 0;
  unsigned long long want_bytes = 0;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads; ++h) {
      const size_t i = size_t(b) * c.heads + h;
      const int s = c.row_slot[size_t(b)];
      const MacRowRule& rule = c.rules[size_t(c.row_policy[size_t(b)])];
      if (s < 0 || !rule.active || c.positions[size_t(b)] + 1 < rule.min_context) {
        EXPECT_EQ(hit[i], -1);
        EXPECT_EQ(band[i], -1);
        continue;
      }
      const int first = c.first(s), count = c.count(s);
      double best = INFINITY;
      int best_e = -1;
      for (int k = 0; k < count; ++k) {
        const int e = (first + k) % rule.window;
        double dist = 0;
        for (int x = 0; x < c.d; ++x) {
          const double diff = double(bf16_to_f32(c.q_pre[i * c.d + x])) -
                              bf16_to_f32(c.ring_q[((size_t(s) * c.capacity + e) * c.heads + h) * c.d + x]);
          dist += diff * diff;
        }
        if (dist <= best) best = dist, best_e = e;
      }
      const bool want = best_e >= 0 && std::sqrt(best) < std::sqrt(2.0 * c.d) * (1.0 - rule.tau);
      want_bytes += (unsigned long long)count * c.d * 2 + (want ? (c.d + 1) * 4 : 0);
      ASSERT_EQ(hit[i] >= 0, want) << "row " << b << " head " << h;
      if (!want) continue;
      ++hits;
      EXPECT_EQ(hit[i], best_e);
      EXPECT_EQ(band[i], mac_prefix_end(c.pos[size_t(s) * c.capacity + best_e], rule.band, c.page_size));
    }
  EXPECT_EQ(bytes, want_bytes);
  EXPECT_GT(hits, 0) << "the case copies entries: some heads must hit";
  // Each row's slot's step view is now its latest (MacRingsView); other slots' untouched.
  for (int s = 0; s < c.slots; ++s) {
    const bool used = std::find(c.row_slot.begin(), c.row_slot.end(), s) != c.row_slot.end();
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(mac_fill_step(fill.data(), s)[k], used ? c.fill[size_t(kMacFillInts) * s + 2 + k] : -5) << "slot " << s;
    EXPECT_EQ(mac_fill_latest(fill.data(), s)[0], c.first(s));
    EXPECT_EQ(mac_fill_latest(fill.data(), s)[1], c.count(s));
  }
}

// Forced hit rates (skim bench): every head of a matching row with entries hits at 1000 per
// mille, none at 0, whatever the distances.
TEST(MacMatch, ForcedHitRates) {
  const test::MacRingCase c(5, 4, 64, 24);
  MacRingsView rings{.capacity = c.capacity, .q_pre = const_cast<uint16_t*>(c.ring_q.data()),
                     .o = const_cast<float*>(c.ring_o.data()), .lse = const_cast<float*>(c.ring_lse.data()),
                     .pos = const_cast<int32_t*>(c.pos.data()), .fill = const_cast<int32_t*>(c.fill.data())};
  for (int forced : {0, 1000}) {
    std::vector<int32_t> band(size_t(c.batch) * c.heads), hit(band.size());
    cpu::mac_match({.batch = c.batch, .num_heads = c.heads, .head_dim = c.d, .page_size = c.page_size,
                    .q_pre = c.q_pre.data(), .positions = c.positions.data(), .row_slot = c.row_slot.data(),
                    .row_policy = c.row_policy.data(), .rules = c.rules.data(), .rings = rings,
                    .band_begin = band.data(), .hit_entry = hit.data(), .forced_hits = forced});
    for (int b = 0; b < c.batch; ++b) {
      const int s = c.row_slot[size_t(b)];
      const bool matches = s >= 0 && c.rules[size_t(c.row_policy[size_t(b)])].active &&
                           c.positions[size_t(b)] + 1 >= c.rules[0].min_context && c.count(s) > 0;
      for (int h = 0; h < c.heads; ++h)
        EXPECT_EQ(hit[size_t(b) * c.heads + h] >= 0, matches && forced == 1000) << "forced " << forced << " row " << b;
    }
  }
}

// Merge and push: the output is reused prefix + below + above, the row's new entry is
// prefix + below with its query and position, written after the newest (or over the oldest),
// and the ring's fill advances; rows without a ring or an active rule push nothing.
TEST(MacMergePush, MergesAndPushesByDefinition) {
  test::MacRingCase c(4, 3, 64, 8);
  std::vector<int32_t> hit(size_t(c.batch) * c.heads, -1);
  for (int b = 1; b < c.batch; ++b)
    for (int h = 0; h < c.heads; ++h)
      if (c.count(b) > 0 && test::random_int(0, 1)) hit[size_t(b) * c.heads + h] = c.first(b);
  std::vector<uint16_t> rq = c.ring_q;
  std::vector<float> ro = c.ring_o, rl = c.ring_lse, out(c.below_o.size()), out_lse(c.below_lse.size());
  std::vector<int32_t> rp = c.pos, rf = c.fill;
  MacRingsView rings{.capacity = c.capacity, .q_pre = rq.data(), .o = ro.data(), .lse = rl.data(), .pos = rp.data(),
                     .fill = rf.data()};
  cpu::mac_merge_push({.merge = {.batch = c.batch, .num_heads = c.heads, .head_dim = c.d, .below_o = c.below_o.data(),
                                 .below_lse = c.below_lse.data(), .above_o = c.above_o.data(),
                                 .above_lse = c.above_lse.data(), .out = out.data()},
                       .out_lse = out_lse.data(), .hit_entry = hit.data(), .row_slot = c.row_slot.data(),
                       .positions = c.positions.data(), .q_pre = c.q_pre.data(), .row_policy = c.row_policy.data(),
                       .rules = c.rules.data(), .rings = rings});
  const int K = c.rules[0].window;
  for (int b = 0; b < c.batch; ++b) {
    const int s = c.row_slot[size_t(b)];
    const bool push = s >= 0 && c.rules[size_t(c.row_policy[size_t(b)])].active;
    const int first = s >= 0 ? c.first(s) : 0, count = s >= 0 ? c.count(s) : 0;
    const int e = count < K ? (first + count) % K : first;
    for (int h = 0; h < c.heads; ++h) {
      const size_t i = size_t(b) * c.heads + h;
      std::vector<float> cache(size_t(c.d), 0.0f);
      float lse = kEmptyLse;
      if (s >= 0 && hit[i] >= 0) {
        const size_t at = (size_t(s) * c.capacity + hit[i]) * c.heads + h;
        std::copy_n(c.ring_o.begin() + long(at * c.d), c.d, cache.begin());
        lse = c.ring_lse[at];
      }
      merge_state(cache.data(), lse, c.below_o.data() + i * c.d, c.below_lse[i], c.d);
      std::vector<float> o = cache;
      float lo = lse;
      merge_state(o.data(), lo, c.above_o.data() + i * c.d, c.above_lse[i], c.d);
      for (int x = 0; x < c.d; ++x) ASSERT_NEAR(out[i * c.d + x], o[size_t(x)], 1e-6) << "row " << b << " head " << h;
      if (lo == kEmptyLse) EXPECT_EQ(out_lse[i], kEmptyLse);
      else EXPECT_NEAR(out_lse[i], lo, 1e-6);
      if (!push) continue;
      const size_t at = (size_t(s) * c.capacity + e) * c.heads + h;
      for (int x = 0; x < c.d; ++x) {
        EXPECT_EQ(rq[at * c.d + x], c.q_pre[i * c.d + x]);
        EXPECT_NEAR(ro[at * c.d + x], cache[size_t(x)], 1e-6);
      }
    }
    if (s < 0) continue;
    if (push) {
      EXPECT_EQ(rp[size_t(s) * c.capacity + e], c.positions[size_t(b)]);
    }
    for (const int32_t* f : {mac_fill_step(rf.data(), s), mac_fill_latest(rf.data(), s)}) {  // both views
      EXPECT_EQ(f[1], push ? std::min(count + 1, K) : count);
      EXPECT_EQ(f[0], !push || count < K ? first : (first + 1) % K);
    }
  }
}

}  // namespace
}  // namespace skim
