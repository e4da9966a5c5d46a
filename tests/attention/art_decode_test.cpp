// cpu::art_decode_attention, the specification of the CUDA ART kernel, against paged decode
// attention over the pages it must read (attention/art_decode_args.h): all of them when no
// round is ever stable, the rounds up to the stop plus the lag when every round after the
// first is; the stats count the same pages.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "../art_decode_case.h"
#include "backend/cpu/art_decode_attention.h"
#include "backend/cpu/paged_decode_attention.h"

namespace skim {
namespace {

struct Result {
  std::vector<float> o, lse;
  ArtDecodeStats stats;
};

Result run_art(const test::ArtDecodeCase& c, ArtDecodeParams p) {
  Result r;
  const size_t heads = size_t(c.batch()) * c.kv_heads * c.group;
  r.o.assign(heads * c.head_dim, NAN);
  r.lse.assign(heads, NAN);
  ArtDecodeArgs a = c.args(c.q.data(), c.k.data(), c.v.data(), c.table.data(), c.list_lens.data(),
                           c.masks.empty() ? nullptr : c.masks.data(), r.o.data(), r.lse.data());
  a.art = p;
  a.stats = &r.stats;
  cpu::art_decode_attention(a);
  return r;
}

// Paged decode attention over the first `read` pages of every list.
Result run_prefix(const test::ArtDecodeCase& c, int read) {
  Result r;
  const size_t heads = size_t(c.batch()) * c.kv_heads * c.group;
  r.o.assign(heads * c.head_dim, NAN);
  r.lse.assign(heads, NAN);
  std::vector<int32_t> t, l;
  std::vector<uint32_t> m;
  c.prefix(read, t, l, m);
  ArtDecodeArgs a = c.args(c.q.data(), c.k.data(), c.v.data(), t.data(), l.data(), m.empty() ? nullptr : m.data(),
                           r.o.data(), r.lse.data());
  cpu::paged_decode_attention(a.attn);
  return r;
}

void expect_same(const Result& a, const Result& b) {
  ASSERT_EQ(a.o.size(), b.o.size());
  for (size_t i = 0; i < a.o.size(); ++i) ASSERT_NEAR(a.o[i], b.o[i], 1e-5) << "o " << i;
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (std::isinf(b.lse[i])) {
      EXPECT_TRUE(std::isinf(a.lse[i]) && a.lse[i] < 0) << "lse " << i;
      continue;
    }
    ASSERT_NEAR(a.lse[i], b.lse[i], 1e-5) << "lse " << i;
  }
}

TEST(ArtDecodeReference, NeverStableReadsEveryPage) {
  for (bool masks : {false, true})
    for (const auto& lens : {std::vector<int>{1000, 16, 0, 257}, std::vector<int>{3000}}) {
      const test::ArtDecodeCase c(64, 2, 4, lens, masks);
      const Result art = run_art(c, {.round_pages = 8, .lag_rounds = 0, .patience = 1, .eps_scale = 0, .eps_dir = 0});
      expect_same(art, run_prefix(c, 1 << 20));
      EXPECT_EQ(art.stats.lists, unsigned(c.batch() * c.kv_heads));
      EXPECT_EQ(art.stats.stopped, 0u);
      EXPECT_EQ(art.stats.pages_read, art.stats.pages_listed);
    }
}

TEST(ArtDecodeReference, StopsAtPatienceAndReadsTheLag) {
  const test::ArtDecodeCase c(128, 2, 3, {4096, 700, 2000, 5}, false);
  for (int patience : {1, 3})
    for (int lag : {0, 2}) {
      SCOPED_TRACE(testing::Message() << "patience " << patience << " lag " << lag);
      const int round = 12;  // pages
      const Result art = run_art(c, {.round_pages = round, .lag_rounds = lag, .patience = patience,
                                     .eps_scale = 1e30f, .eps_dir = 1e30f});
      const int read = (patience + lag + 1) * round;  // round 0 is never stable: the stop is round `patience`
      expect_same(art, run_prefix(c, read));
      unsigned long long listed = 0, pages_read = 0, stopped = 0;
      for (int len : c.lens) {
        const int n = (len + 15) / 16, rounds = (n + round - 1) / round;
        const int got = patience + 1 < rounds ? std::min(n, read) : n;  // the last round is never tested
        listed += 2 * n;
        pages_read += 2 * got;
        stopped += 2 * (got < n);
      }
      EXPECT_EQ(art.stats.pages_listed, listed);
      EXPECT_EQ(art.stats.pages_read, pages_read);
      EXPECT_EQ(art.stats.stopped, stopped);
    }
}

// Masked heads (Quest's union) may attend nothing in the first rounds: they count as unstable
// until they have keys, and the verdicts still come out.
TEST(ArtDecodeReference, MaskedHeadsWithoutKeysYet) {
  const test::ArtDecodeCase c(64, 3, 3, {20000, 999}, true);
  const Result art = run_art(c, {.round_pages = 4, .lag_rounds = 1, .patience = 2, .eps_scale = 1e30f, .eps_dir = 1e30f});
  EXPECT_EQ(art.stats.lists, 6u);
  EXPECT_GT(art.stats.stopped, 0u);
  EXPECT_LT(art.stats.pages_read, art.stats.pages_listed);
  for (float x : art.o) ASSERT_TRUE(std::isfinite(x));
}

// Per-row rules: a row whose policy is not ART reads its whole list (paged decode order, the
// partial page last) and counts in no stats; an ART row follows its rule.
TEST(ArtDecodeReference, RowsFollowTheirPolicysRule) {
  const test::ArtDecodeCase c(64, 1, 4, {3000, 3000}, false);
  std::vector<int32_t> t_all, l_all;
  std::vector<uint32_t> m_all;
  c.prefix(1 << 20, t_all, l_all, m_all);
  std::vector<int32_t> table = c.table;  // row 0 not ART: paged decode order
  std::copy_n(t_all.begin(), c.pages.stride, table.begin());
  const std::vector<int32_t> row_policy{0, 1};
  const std::vector<ArtRowRule> rules{ArtRowRule{.active = 0},
                                      ArtRowRule{.active = 1, .round_pages = 8, .lag_rounds = 1, .patience = 1,
                                                 .eps_scale = 1e30f, .eps_dir = 1e30f}};
  Result art;
  art.o.assign(2 * 4 * 64, NAN);
  art.lse.assign(8, NAN);
  ArtDecodeArgs a = c.args(c.q.data(), c.k.data(), c.v.data(), table.data(), c.list_lens.data(), nullptr, art.o.data(),
                           art.lse.data());
  a.art.round_pages = 8;
  a.row_policy = row_policy.data();
  a.rules = rules.data();
  a.stats = &art.stats;
  cpu::art_decode_attention(a);
  EXPECT_EQ(art.stats.lists, 1u);
  EXPECT_EQ(art.stats.pages_read, 3u * 8u);  // rounds 0, 1 (the stop) and the lag's 2
  const Result all = run_prefix(c, 1 << 20), first = run_prefix(c, 24);
  for (int i = 0; i < 4 * 64; ++i) EXPECT_NEAR(art.o[size_t(i)], all.o[size_t(i)], 1e-5) << "row 0, " << i;
  for (int i = 4 * 64; i < 8 * 64; ++i) EXPECT_NEAR(art.o[size_t(i)], first.o[size_t(i)], 1e-5) << "row 1, " << i;
}

TEST(ArtDecodeReference, RefusesWhatItCannotRun) {
  const test::ArtDecodeCase c(64, 1, 9, {100}, false);  // a group of 9
  std::vector<float> o(9 * 64), lse(9);
  ArtDecodeArgs a = c.args(c.q.data(), c.k.data(), c.v.data(), c.table.data(), c.list_lens.data(), nullptr, o.data(),
                           lse.data());
  EXPECT_THROW(cpu::art_decode_attention(a), std::invalid_argument);
  const test::ArtDecodeCase ok(64, 1, 4, {100}, false);
  a = ok.args(ok.q.data(), ok.k.data(), ok.v.data(), ok.table.data(), ok.list_lens.data(), nullptr, o.data(), lse.data());
  a.art.round_pages = 6;
  EXPECT_THROW(cpu::art_decode_attention(a), std::invalid_argument);
}

}  // namespace
}  // namespace skim
