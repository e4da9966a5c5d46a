#include "backend/cpu/attend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "../test_random.h"
#include "attention/policy.h"
#include "attention/attention_state.h"
#include "backend/cpu/causal_attend.h"
#include "backend/cpu/split_attend.h"

namespace skim {
namespace {

// A cache holding one sequence of `len` random tokens with shuffled pages.
struct Fixture {
  KVCacheShape shape;
  PagedKVCache cache;
  PageTable table;

  Fixture(int len, int kv_heads, int d)
      : shape{1, kv_heads, d, 16, (len + 15) / 16 + 8}, cache(shape) {
    // Take pages out of order so the test sees a non-contiguous page table.
    PageTable scratch;
    cache.reserve(scratch, 16 * 4);
    cache.reserve(table, len);
    cache.release(scratch);
    table.length = len;
    for (int p = 0; p < len; ++p) {
      auto k = test::random_vector(size_t(kv_heads) * d);
      auto v = test::random_vector(size_t(kv_heads) * d);
      cache.write(0, table, p, k.data(), v.data());
    }
  }
  SeqKV seq(int h) const { return SeqKV{cache.layer(0), table.pages.data(), h}; }
};

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << i;
}

TEST(Attend, MatchesReferenceOnRandomRanges) {
  for (int trial = 0; trial < 20; ++trial) {
    int len = test::random_int(1, 700), n_q = test::random_int(1, 20), d = 64;
    Fixture f(len, 1, d);
    std::vector<KeyRange> ranges;
    for (int b = 0; b < len;) {
      int e = std::min(len, b + test::random_int(1, 150));
      if (test::random_int(0, 2)) ranges.push_back({b, e});
      b = e;
    }
    auto q = test::random_vector(size_t(n_q) * d, 0.5f);
    std::vector<float> o(q.size()), o_ref(q.size()), lse(n_q), lse_ref(n_q);
    attend(q.data(), n_q, f.seq(0), ranges, 0.125f, o.data(), lse.data());
    attend_reference(q.data(), n_q, f.seq(0), ranges, 0.125f, o_ref.data(), lse_ref.data());
    expect_close(o, o_ref, 1e-5f);
    for (int h = 0; h < n_q; ++h) {
      if (ranges.empty()) {
        EXPECT_EQ(lse[h], kEmptyLse);
      } else {
        EXPECT_NEAR(lse[h], lse_ref[h], 1e-4f);
      }
    }
  }
}

// Scattered single keys and short runs in any order, empty ranges among them (what cs and
// retro hand over): a scoring block spans range boundaries, so this is where it could go wrong.
TEST(Attend, MatchesReferenceOnScatteredUnsortedRanges) {
  for (int trial = 0; trial < 20; ++trial) {
    int len = test::random_int(1, 900), n_q = test::random_int(1, 20), d = 64;
    Fixture f(len, 1, d);
    std::vector<KeyRange> ranges;
    for (int b = 0; b < len;) {
      int e = std::min(len, b + (test::random_int(0, 3) ? 1 : test::random_int(1, 90)));
      if (test::random_int(0, 1)) ranges.push_back({b, e});
      if (test::random_int(0, 9) == 0) ranges.push_back({b, b});  // empty
      b = e;
    }
    std::shuffle(ranges.begin(), ranges.end(), test::rng());
    auto q = test::random_vector(size_t(n_q) * d, 0.5f);
    std::vector<float> o(q.size()), o_ref(q.size()), lse(n_q), lse_ref(n_q);
    attend(q.data(), n_q, f.seq(0), ranges, 0.125f, o.data(), lse.data());
    attend_reference(q.data(), n_q, f.seq(0), ranges, 0.125f, o_ref.data(), lse_ref.data());
    expect_close(o, o_ref, 1e-5f);
    const bool none = std::all_of(ranges.begin(), ranges.end(), [](KeyRange r) { return r.end == r.begin; });
    for (int h = 0; h < n_q; ++h) {
      if (none) EXPECT_EQ(lse[h], kEmptyLse);
      else EXPECT_NEAR(lse[h], lse_ref[h], 1e-4f);
    }
  }
}

TEST(AttentionState, MergeOfDisjointSetsEqualsTheUnion) {
  int len = 500, d = 32, n_q = 3;
  Fixture f(len, 1, d);
  auto q = test::random_vector(size_t(n_q) * d);
  // Three disjoint parts merged in both association orders.
  std::vector<KeyRange> parts[3] = {{{0, 100}}, {{100, 101}, {300, 500}}, {{101, 300}}};
  std::vector<float> o[3], lse[3];
  for (int i = 0; i < 3; ++i) {
    o[i].resize(size_t(n_q) * d);
    lse[i].resize(n_q);
    attend(q.data(), n_q, f.seq(0), parts[i], 0.2f, o[i].data(), lse[i].data());
  }
  std::vector<KeyRange> all = {{0, 500}};
  std::vector<float> o_all(size_t(n_q) * d), lse_all(n_q);
  attend(q.data(), n_q, f.seq(0), all, 0.2f, o_all.data(), lse_all.data());
  for (int h = 0; h < n_q; ++h) {
    // ((0 + 1) + 2)
    std::vector<float> a(o[0].begin() + h * d, o[0].begin() + (h + 1) * d);
    float la = lse[0][h];
    merge_state(a.data(), la, o[1].data() + h * d, lse[1][h], d);
    merge_state(a.data(), la, o[2].data() + h * d, lse[2][h], d);
    // (0 + (1 + 2))
    std::vector<float> b(o[1].begin() + h * d, o[1].begin() + (h + 1) * d);
    float lb = lse[1][h];
    merge_state(b.data(), lb, o[2].data() + h * d, lse[2][h], d);
    std::vector<float> c(o[0].begin() + h * d, o[0].begin() + (h + 1) * d);
    float lc = lse[0][h];
    merge_state(c.data(), lc, b.data(), lb, d);
    std::vector<float> want(o_all.begin() + h * d, o_all.begin() + (h + 1) * d);
    expect_close(a, want, 1e-5f);
    expect_close(c, want, 1e-5f);
    EXPECT_NEAR(la, lse_all[h], 1e-4f);
    EXPECT_NEAR(lc, lse_all[h], 1e-4f);
  }
}

TEST(AttentionState, EmptyStateIsTheIdentity) {
  int d = 16;
  auto o = test::random_vector(size_t(d));
  auto keep = o;
  float lse = 1.5f;
  std::vector<float> empty(size_t(d), 0.0f);
  merge_state(o.data(), lse, empty.data(), kEmptyLse, d);
  expect_close(o, keep, 0.0f);
  EXPECT_EQ(lse, 1.5f);
  std::vector<float> e2(size_t(d), 0.0f);
  float le = kEmptyLse;
  merge_state(e2.data(), le, o.data(), lse, d);
  expect_close(e2, keep, 0.0f);
  EXPECT_EQ(le, 1.5f);
}

TEST(AttendRows, SplitKVEqualsOnePass) {
  // A long decode row with GQA: the threaded split must equal the single pass.
  int len = 9000, kv_heads = 2, group = 4, d = 64;
  Fixture f(len, kv_heads, d);
  AttentionBatch b;
  b.num_rows = 1;
  b.num_heads = kv_heads * group;
  b.num_kv_heads = kv_heads;
  b.head_dim = d;
  b.scale = 0.125f;
  b.decode = true;
  b.kv = f.cache.layer(0);
  int pos = len - 1;
  b.positions = &pos;
  const PageTable* tp = &f.table;
  b.tables = &tp;
  auto q = test::random_vector(size_t(b.num_heads) * d, 0.5f);
  std::vector<float> out(q.size());
  b.q = q.data();
  b.out = out.data();
  std::vector<AttendTask> tasks;
  for (int h = 0; h < kv_heads; ++h) tasks.push_back({0, h, h * group, group, {{0, len}}});
  attend_tasks(b.rows(), tasks);
  for (int h = 0; h < kv_heads; ++h) {
    std::vector<float> o(size_t(group) * d), lse(group);
    attend_reference(q.data() + size_t(h) * group * d, group, f.seq(h), tasks[0].ranges, 0.125f,
                     o.data(), lse.data());
    std::vector<float> got(out.begin() + h * group * d, out.begin() + (h + 1) * group * d);
    expect_close(got, o, 1e-5f);
  }
}

// Heads of a group with different, overlapping ranges (MAC's bands, per-head selections) and
// two entries per head, as MAC's below/above parts: each entry's state is its own.
TEST(AttendRows, SharedKeysEqualReferencePerEntry) {
  for (int trial = 0; trial < 6; ++trial) {
    const int len = test::random_int(1, 3000), kv_heads = test::random_int(1, 3), group = test::random_int(1, 4), d = 64;
    Fixture f(len, kv_heads, d);
    AttentionBatch b;
    b.num_rows = 1;
    b.num_heads = kv_heads * group;
    b.num_kv_heads = kv_heads;
    b.head_dim = d;
    b.scale = 0.125f;
    b.decode = true;
    b.kv = f.cache.layer(0);
    int pos = len - 1;
    b.positions = &pos;
    const PageTable* tp = &f.table;
    b.tables = &tp;
    auto q = test::random_vector(size_t(b.num_heads) * d, 0.5f);
    b.q = q.data();
    std::vector<HeadKeys> entries;
    for (int h = 0; h < b.num_heads; ++h)
      for (int part = 0; part < 2; ++part) {
        std::vector<KeyRange> ranges;
        const int n = test::random_int(0, 4);
        for (int i = 0; i < n; ++i) {
          const int a = test::random_int(0, len), e = test::random_int(0, len);
          ranges.push_back({std::min(a, e), std::max(a, e)});
        }
        entries.push_back({0, h, coalesce_ranges(ranges)});
      }
    std::vector<float> o(entries.size() * d), lse(entries.size());
    attend_shared_keys(b.rows(), entries, o.data(), lse.data());
    std::vector<float> ref(static_cast<size_t>(d)), ref_lse(1);
    for (size_t i = 0; i < entries.size(); ++i) {
      const HeadKeys& e = entries[i];
      attend_reference(q.data() + size_t(e.head) * d, 1, f.seq(e.head / group), e.ranges, 0.125f, ref.data(), ref_lse.data());
      std::vector<float> got(o.begin() + long(i * d), o.begin() + long((i + 1) * d));
      expect_close(got, ref, 1e-5f);
      if (e.ranges.empty()) {
        EXPECT_EQ(lse[i], kEmptyLse);
      } else {
        EXPECT_NEAR(lse[i], ref_lse[0], 1e-4f);
      }
    }
  }
}

}  // namespace
}  // namespace skim

namespace skim {
namespace {

TEST(AttendCausal, EqualsAttendPerRow) {
  for (int trial = 0; trial < 6; ++trial) {
    int len = test::random_int(1, 400), group = test::random_int(1, 5), d = trial % 2 ? 64 : 128;
    int rows = test::random_int(1, std::min(len, 100)), first = len - rows;
    Fixture f(len, 1, d);
    auto q = test::random_vector(size_t(rows) * group * d, 0.5f);
    std::vector<float> out(q.size()), ref(q.size()), lse(group);
    CausalRun run{q.data(), out.data(), group * d, rows, group, first};
    attend_causal(run, f.seq(0), 0.1f);
    for (int r = 0; r < rows; ++r) {
      std::vector<KeyRange> ranges = {{0, first + r + 1}};
      attend_reference(q.data() + size_t(r) * group * d, group, f.seq(0), ranges, 0.1f,
                       ref.data() + size_t(r) * group * d, lse.data());
    }
    expect_close(out, ref, 2e-5f);
  }
}

// MAC's ring rows: the prefix state each row gets beside its output is the plain state over
// [0, position + 1 - band), and the output keeps the bits it has without prefixes.
TEST(AttendCausal, PrefixStatesEqualReference) {
  for (int trial = 0; trial < 12; ++trial) {
    const int len = test::random_int(1, 400), group = test::random_int(1, 5), d = trial % 2 ? 64 : 128;
    const int rows = test::random_int(1, std::min(len, 100)), first = len - rows;
    // Bands that end prefixes before the first key, inside tiles and on tile edges (64 keys).
    const int band = trial % 3 == 0 ? test::random_int(0, len + 8) : 64 * test::random_int(0, 4) + (trial % 3 == 1);
    Fixture f(len, 1, d);
    auto q = test::random_vector(size_t(rows) * group * d, 0.5f);
    std::vector<float> plain(q.size()), out(q.size()), prefix_o(q.size()), prefix_lse(size_t(rows) * group);
    CausalRun run{q.data(), plain.data(), group * d, rows, group, first};
    attend_causal(run, f.seq(0), 0.1f);
    run.out = out.data();
    run.prefix_band = band;
    run.prefix_o = prefix_o.data();
    run.prefix_lse = prefix_lse.data();
    run.lse_stride = group;
    attend_causal(run, f.seq(0), 0.1f);
    EXPECT_EQ(out, plain) << "trial " << trial;
    std::vector<float> ref(size_t(group) * d), ref_lse(group);
    for (int r = 0; r < rows; ++r) {
      const int end = first + r + 1 - band;
      std::vector<KeyRange> ranges;
      if (end > 0) ranges.push_back({0, end});
      attend_reference(q.data() + size_t(r) * group * d, group, f.seq(0), ranges, 0.1f, ref.data(), ref_lse.data());
      for (int g = 0; g < group; ++g) {
        const float lse = prefix_lse[size_t(r) * group + g];
        if (end <= 0) {
          EXPECT_EQ(lse, kEmptyLse) << "trial " << trial << " row " << r;
        } else {
          EXPECT_NEAR(lse, ref_lse[size_t(g)], 1e-4f) << "trial " << trial << " row " << r;
        }
        for (int i = 0; i < d; ++i)
          EXPECT_NEAR(prefix_o[(size_t(r) * group + g) * d + i], ref[size_t(g) * d + i], 2e-5f)
              << "trial " << trial << " row " << r << " band " << band;
      }
    }
  }
}

}  // namespace
}  // namespace skim
