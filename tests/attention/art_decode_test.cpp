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
#include "core/dtype.h"

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

// The fp32 kernel the CPU engine runs (ArtDecodeArgsF32) on the reference's inputs widened: the
// same pages read, the same stats, o and lse within fp32 of the reference, on the cases above
// (never stable, stopping at patience plus the lag, masks, rows of other policies).
Result run_art_f32(const test::ArtDecodeCase& c, ArtDecodeParams p, const int32_t* table = nullptr,
                   const int32_t* row_policy = nullptr, const ArtRowRule* rules = nullptr) {
  auto widen = [](const std::vector<uint16_t>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_f32(x[i]);
    return y;
  };
  const std::vector<float> q = widen(c.q), k = widen(c.k), v = widen(c.v);
  Result r;
  const size_t heads = size_t(c.batch()) * c.kv_heads * c.group;
  r.o.assign(heads * c.head_dim, NAN);
  r.lse.assign(heads, NAN);
  const ArtDecodeArgs b = c.args(c.q.data(), c.k.data(), c.v.data(), table ? table : c.table.data(),
                                 c.list_lens.data(), c.masks.empty() ? nullptr : c.masks.data(), r.o.data(), r.lse.data());
  std::vector<int32_t> reads(size_t(c.batch()) * c.kv_heads, -1);
  ArtDecodeArgsF32 a{.attn = {.batch = b.attn.batch, .num_heads = b.attn.num_heads, .num_kv_heads = b.attn.num_kv_heads,
                              .head_dim = b.attn.head_dim, .page_size = b.attn.page_size,
                              .max_pages_per_seq = b.attn.max_pages_per_seq, .scale = b.attn.scale,
                              .tables_per_kv_head = true, .q = q.data(), .k_pool = k.data(), .v_pool = v.data(),
                              .page_table = b.attn.page_table, .seq_lens = b.attn.seq_lens,
                              .head_masks = b.attn.head_masks, .o = r.o.data(), .lse = r.lse.data()},
                     .art = p, .stats = &r.stats, .row_policy = row_policy, .rules = rules,
                     .list_pages_read = reads.data()};
  cpu::art_decode_attention(a);
  unsigned long long read = 0;
  for (int32_t x : reads) read += unsigned(x);
  if (!rules) {
    EXPECT_EQ(read, r.stats.pages_read) << "pages read per list";
  }
  return r;
}

void expect_same_run(const Result& f32, const Result& ref) {
  expect_same(f32, ref);
  EXPECT_EQ(f32.stats.lists, ref.stats.lists);
  EXPECT_EQ(f32.stats.stopped, ref.stats.stopped);
  EXPECT_EQ(f32.stats.pages_listed, ref.stats.pages_listed);
  EXPECT_EQ(f32.stats.pages_read, ref.stats.pages_read);
}

TEST(ArtDecodeF32, EqualsTheReference) {
  for (bool masks : {false, true})
    for (const auto& lens : {std::vector<int>{1000, 16, 0, 257}, std::vector<int>{3000}}) {
      const test::ArtDecodeCase c(64, 2, 4, lens, masks);
      const ArtDecodeParams never{.round_pages = 8, .lag_rounds = 0, .patience = 1, .eps_scale = 0, .eps_dir = 0};
      expect_same_run(run_art_f32(c, never), run_art(c, never));
    }
  const test::ArtDecodeCase c(128, 2, 3, {4096, 700, 2000, 5}, true);
  for (int patience : {1, 3})
    for (int lag : {0, 2}) {
      SCOPED_TRACE(testing::Message() << "patience " << patience << " lag " << lag);
      const ArtDecodeParams p{.round_pages = 12, .lag_rounds = lag, .patience = patience, .eps_scale = 1e30f,
                              .eps_dir = 1e30f};
      expect_same_run(run_art_f32(c, p), run_art(c, p));
    }
}

// A head that attends no page of a list (MAC's `below` lists leave a hit whose band starts at
// the prefix end so) has an empty state, which is never stable: it counts stable instead, and
// the group stops at patience plus the lag as without it; both kernels, the same pages read.
TEST(ArtDecodeF32, AHeadWithoutPagesDoesNotHoldItsGroupsStop) {
  test::ArtDecodeCase c(64, 2, 4, {4096, 1500}, true);
  // Head 1 of every group: no page; the others every page. (With the others' random masks a
  // head whose first page came after round 0 was not yet stable there, and the list read a round
  // more than this test counts: about 1% of seeds, e.g. SKIM_TEST_SEED=914318224.)
  for (uint32_t& m : c.masks) m = ((1u << c.group) - 1u) & ~2u;
  const ArtDecodeParams p{.round_pages = 8, .lag_rounds = 1, .patience = 2, .eps_scale = 1e30f, .eps_dir = 1e30f};
  const int read = (p.patience + p.lag_rounds + 1) * p.round_pages;
  const Result art = run_art(c, p);
  EXPECT_EQ(art.stats.stopped, art.stats.lists);
  EXPECT_EQ(art.stats.pages_read, art.stats.lists * unsigned(read));
  expect_same(art, run_prefix(c, read));
  expect_same_run(run_art_f32(c, p), art);
}

// A list of more than kArtMaxVerdicts rounds gets longer rounds (art_list_round_pages), whole
// blocks of at most kArtMaxRoundBlocks, and its lag the same reach in pages (art_list_lag).
TEST(ArtDecode, LongListsGetLongerRounds) {
  EXPECT_EQ(art_list_round_pages(16, 512, 4), 16);    // 32 rounds of the rule's: kept
  EXPECT_EQ(art_list_round_pages(16, 513, 4), 20);    // 17 pages a verdict: 5 whole blocks
  EXPECT_EQ(art_list_round_pages(32, 2048, 4), 64);   // 32K tokens at rounds of 8 blocks: 16 blocks
  EXPECT_EQ(art_list_round_pages(32, 8192, 4), 128);  // 128K: 64 blocks a verdict, capped at 32
  EXPECT_EQ(art_list_round_pages(32, 100000, 4), 128);
  EXPECT_EQ(art_list_round_pages(12, 700, 3), 24);    // the CPU's blocks of 3 pages (art:block=48)
  EXPECT_EQ(art_list_lag(10, 32, 64), 5);
  EXPECT_EQ(art_list_lag(3, 16, 20), 3);  // rounded up: never less reach than the rule's
  EXPECT_EQ(art_list_lag(0, 16, 128), 0);

  // Stops forced at the patience: a 625-page list reads rounds of 20 pages (5 blocks), its lag of
  // one 4-page round one round of 20; the 40-page list keeps rounds of 4.
  const test::ArtDecodeCase c(64, 2, 4, {10000, 640}, false);
  const ArtDecodeParams p{.round_pages = 4, .lag_rounds = 1, .patience = 2, .eps_scale = 1e30f, .eps_dir = 1e30f};
  const Result art = run_art(c, p);
  EXPECT_EQ(art.stats.stopped, art.stats.lists);
  EXPECT_EQ(art.stats.pages_read, 2u * (2 + 1 + 1) * 20 + 2u * (2 + 1 + 1) * 4);
  expect_same_run(run_art_f32(c, p), art);
}

TEST(ArtDecodeF32, RowsFollowTheirPolicysRule) {
  const test::ArtDecodeCase c(64, 2, 4, {3000, 1500}, false);
  const std::vector<int32_t> row_policy{1, 0};
  const std::vector<ArtRowRule> rules{ArtRowRule{.active = 0},
                                      ArtRowRule{.active = 1, .round_pages = 8, .lag_rounds = 1, .patience = 1,
                                                 .eps_scale = 1e30f, .eps_dir = 1e30f}};
  std::vector<int32_t> t_all, l_all;
  std::vector<uint32_t> m_all;
  c.prefix(1 << 20, t_all, l_all, m_all);
  std::vector<int32_t> table = c.table;  // row 1 not ART: paged decode order
  std::copy_n(t_all.begin() + 2 * c.pages.stride, 2 * c.pages.stride, table.begin() + 2 * c.pages.stride);
  const ArtDecodeParams p{.round_pages = 8};
  Result ref;
  ref.o.assign(2 * 8 * 64, NAN);
  ref.lse.assign(16, NAN);
  ArtDecodeArgs a = c.args(c.q.data(), c.k.data(), c.v.data(), table.data(), c.list_lens.data(), nullptr, ref.o.data(),
                           ref.lse.data());
  a.art = p;
  a.row_policy = row_policy.data();
  a.rules = rules.data();
  a.stats = &ref.stats;
  cpu::art_decode_attention(a);
  expect_same_run(run_art_f32(c, p, table.data(), row_policy.data(), rules.data()), ref);
}

// What only the fp32 kernel takes (the CPU policy's art:block, art:round, art:test=full): rounds
// that are no multiple of 4 pages, blocks of other sizes, the test on the whole output; with
// every test stable, the rounds up to the stop plus the lag are read.
TEST(ArtDecodeF32, AnyRoundAndBlockAndTheFullTest) {
  // At most kArtMaxVerdicts rounds a list, so that the rule's round holds (LongListsGetLongerRounds).
  const test::ArtDecodeCase c(64, 1, 4, {500, 333}, false);
  for (int round : {1, 6})
    for (bool full : {false, true}) {
      const ArtDecodeParams p{.round_pages = round, .lag_rounds = 1, .patience = 2, .eps_scale = 1e30f,
                              .eps_dir = 1e30f, .full_test = full, .block_pages = 2};
      const Result r = run_art_f32(c, p);
      const int read = (2 + 1 + 1) * round;  // round 0 never stable; stop at round 2; one lag round
      expect_same(r, run_prefix(c, read));
      unsigned want = 0;
      for (int len : c.lens) {
        const int n = (len + 15) / 16, rounds = (n + round - 1) / round;
        want += unsigned(2 + 1 < rounds ? std::min(n, read) : n);  // the last round is never tested
      }
      EXPECT_EQ(r.stats.pages_read, want) << "round " << round;
    }
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
