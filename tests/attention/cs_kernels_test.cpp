// CSAttention's kernels (attention/cs_kernel_args.h). cpu::cs_select, the decode search,
// against its definition written plainly: per subspace the nearest centroids by cosine (the
// back-off's top ones below the threshold), every entry of their lists summed per key with the
// query slice's norm as weight and the list's tail as floor, then the n_pick best sums below
// the window (a full sort, ties by position); random tables and queries, several searches in
// one call, by position and by score, and the candidates it reports. cpu::cs_insert against
// the best scores of a stream; cpu::cs_build's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <numeric>

#include "../cs_tables_case.h"
#include "../test_random.h"
#include "attention/cs_sample_room.h"
#include "backend/cpu/cs_kernels.h"
#include "backend/cpu/top_list.h"
#include "core/dtype.h"

namespace skim {
namespace {

// The definition: the picks in ascending position (or by score), and the candidates.
std::vector<int32_t> definition(const test::CsTables& t, const float* q, int context, int wb, int n_pick, double backoff,
                                int backoff_top, bool by_score, std::vector<uint8_t>& candidates) {
  std::map<int32_t, float> sums;
  for (int m = 0; m < t.M; ++m) {
    std::vector<float> s(q + size_t(m) * t.ds, q + size_t(m + 1) * t.ds);
    double n2 = 0;
    for (float x : s) n2 += double(x) * x;
    const float norm = float(std::sqrt(n2));
    for (float& x : s) x /= norm;
    std::vector<std::pair<float, int>> cos;
    for (int c = 0; c < t.C; ++c) {
      float d = 0;
      for (int i = 0; i < t.ds; ++i) d += t.centroids[(size_t(m) * t.C + c) * t.ds + i] * s[size_t(i)];
      cos.push_back({d, c});
    }
    std::sort(cos.begin(), cos.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    const int take = cos[0].first < backoff ? std::min(t.C, backoff_top) : 1;
    for (int k = 0; k < take; ++k) {
      const int l = m * t.C + cos[size_t(k)].second;
      for (int i = 0; i < t.size[size_t(l)]; ++i) {
        const int32_t key = t.index[size_t(l) * t.L + i];
        sums[key] += norm * (f16_to_f32(t.score[size_t(l) * t.L + i]) - t.tail[size_t(l)]);
      }
    }
  }
  candidates.assign(size_t(context), 0);
  std::vector<std::pair<float, int32_t>> below;
  for (auto [key, sum] : sums) {
    candidates[size_t(key)] = 1;
    if (key < wb) below.push_back({sum, key});
  }
  std::sort(below.begin(), below.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  below.resize(std::min(below.size(), size_t(n_pick)));
  std::vector<int32_t> picks;
  for (auto [sum, key] : below) picks.push_back(key);
  if (!by_score) std::sort(picks.begin(), picks.end());
  return picks;
}

TEST(CsSelect, EqualsItsDefinition) {
  const int d = 64, M = 4, C = 16, L = 40;
  for (bool by_score : {false, true})
    for (double backoff : {-1.0, 0.5}) {
      const int searches = 5;
      std::vector<test::CsTables> tables;
      std::vector<CsTablesView> views;
      std::vector<int32_t> context, wb, n_pick;
      for (int s = 0; s < searches; ++s) {
        context.push_back(test::random_int(50, 300));
        tables.push_back(test::random_cs_tables(M, C, d / M, L, context.back()));
        wb.push_back(std::max(0, context.back() - test::random_int(0, 40)));
        n_pick.push_back(test::random_int(0, 60));
      }
      for (const test::CsTables& t : tables) views.push_back(t.view());
      const std::vector<float> q = test::random_vector(size_t(searches) * d);
      const int max_picks = *std::max_element(wb.begin(), wb.end());
      std::vector<int32_t> picks(size_t(searches) * max_picks, -1), counts(searches, -1);
      const int stride = *std::max_element(context.begin(), context.end());
      std::vector<uint8_t> candidates(size_t(searches) * stride, 7);
      CsSelectStats stats;
      cpu::CsSelectScratch scratch;
      cpu::cs_select({.searches = searches, .head_dim = d, .subspaces = M, .centroids = C, .list_capacity = L,
                      .score_dot = true, .missing_mean = true, .by_score = by_score, .backoff = backoff,
                      .backoff_top = 3, .queries = q.data(), .tables = views.data(), .context = context.data(),
                      .window_begin = wb.data(), .n_pick = n_pick.data(), .max_picks = max_picks,
                      .picks = picks.data(), .pick_counts = counts.data(), .candidates = candidates.data(),
                      .candidate_stride = stride, .stats = &stats},
                     scratch);
      for (int s = 0; s < searches; ++s) {
        std::vector<uint8_t> want_candidates;
        const std::vector<int32_t> want = definition(tables[size_t(s)], q.data() + size_t(s) * d, context[size_t(s)],
                                                     wb[size_t(s)], n_pick[size_t(s)], backoff, 3, by_score,
                                                     want_candidates);
        const std::vector<int32_t> got(picks.begin() + std::ptrdiff_t(s) * max_picks,
                                       picks.begin() + std::ptrdiff_t(s) * max_picks + counts[size_t(s)]);
        EXPECT_EQ(got, want) << "search " << s << (by_score ? " by score" : " by position") << ", backoff " << backoff;
        for (int k = 0; k < context[size_t(s)]; ++k)
          ASSERT_EQ(candidates[size_t(s) * stride + k], want_candidates[size_t(k)]) << "search " << s << " key " << k;
      }
      EXPECT_EQ(stats.subspace_searches, uint64_t(searches) * M);
      if (backoff < 0) {
        EXPECT_EQ(stats.backoffs, 0u);
      }
      EXPECT_TRUE(std::all_of(scratch.sums.begin(), scratch.sums.end(), [](float x) { return x == 0.0f; }))
          << "the sums are left zero for the next search";
    }
}

// A skipped search (CsSelectArgs::skip, a search period's steps between searches) writes
// nothing: its picks, count and candidates keep what they held; the others pick as without skips.
TEST(CsSelect, SkippedSearchesWriteNothing) {
  const int d = 64, M = 4, C = 16, L = 40, searches = 4, context = 200, max_picks = 180;
  std::vector<test::CsTables> tables;
  std::vector<CsTablesView> views;
  for (int s = 0; s < searches; ++s) tables.push_back(test::random_cs_tables(M, C, d / M, L, context));
  for (const test::CsTables& t : tables) views.push_back(t.view());
  const std::vector<float> q = test::random_vector(size_t(searches) * d);
  const std::vector<int32_t> ctx(searches, context), wb(searches, max_picks), n_pick(searches, 30);
  const std::vector<uint8_t> skip = {0, 1, 0, 1};
  auto run = [&](const uint8_t* skips, std::vector<int32_t>& picks, std::vector<int32_t>& counts,
                 std::vector<uint8_t>& candidates, CsSelectStats& stats) {
    cpu::CsSelectScratch scratch;
    cpu::cs_select({.searches = searches, .head_dim = d, .subspaces = M, .centroids = C, .list_capacity = L,
                    .backoff_top = 2, .queries = q.data(), .tables = views.data(), .context = ctx.data(),
                    .window_begin = wb.data(), .n_pick = n_pick.data(), .max_picks = max_picks, .picks = picks.data(),
                    .pick_counts = counts.data(), .candidates = candidates.data(), .candidate_stride = context,
                    .stats = &stats, .skip = skips},
                   scratch);
  };
  std::vector<int32_t> all_picks(size_t(searches) * max_picks, -1), all_counts(searches, -1);
  std::vector<uint8_t> all_candidates(size_t(searches) * context, 7);
  CsSelectStats all_stats, some_stats;
  run(nullptr, all_picks, all_counts, all_candidates, all_stats);
  std::vector<int32_t> picks(all_picks.size(), -5), counts(searches, -5);
  std::vector<uint8_t> candidates(all_candidates.size(), 9);
  run(skip.data(), picks, counts, candidates, some_stats);
  for (int s = 0; s < searches; ++s) {
    const auto row = [&](const auto& v, size_t width) { return std::vector(v.begin() + std::ptrdiff_t(s * width), v.begin() + std::ptrdiff_t((s + 1) * width)); };
    if (skip[size_t(s)]) {
      EXPECT_EQ(counts[size_t(s)], -5) << "search " << s;
      EXPECT_EQ(row(picks, max_picks), std::vector<int32_t>(max_picks, -5)) << "search " << s;
      EXPECT_EQ(row(candidates, context), std::vector<uint8_t>(context, 9)) << "search " << s;
    } else {
      EXPECT_EQ(counts[size_t(s)], all_counts[size_t(s)]) << "search " << s;
      const auto got = row(picks, max_picks), want = row(all_picks, max_picks);
      const auto n = std::ptrdiff_t(all_counts[size_t(s)]);
      EXPECT_EQ(std::vector(got.begin(), got.begin() + n), std::vector(want.begin(), want.begin() + n)) << "search " << s;
      EXPECT_EQ(row(candidates, context), row(all_candidates, context)) << "search " << s;
    }
  }
  EXPECT_EQ(some_stats.subspace_searches, all_stats.subspace_searches / 2);
}

// The streaming insert: a stream of keys into empty lists leaves each list (m, c) holding the
// L best fp16 scores c . k_m of the stream (ties: the earlier key), with and without the admit
// cache; with score=cos the slices are normalised first. Centroids of sixteenths and key slices
// with one nonzero power of two make every score exact in any summation order, and many equal.
TEST(CsInsert, ListsHoldTheBestScoresOfTheStream) {
  const int d = 32, M = 2, C = 5, L = 7, ds = d / M, n = 120;
  std::vector<float> centroids(size_t(M) * C * ds);
  for (float& x : centroids) x = float(test::random_int(-16, 16)) / 16.0f;
  std::vector<float> keys(size_t(n) * d, 0.0f);
  for (int i = 0; i < n; ++i)
    for (int m = 0; m < M; ++m)
      keys[size_t(i) * d + size_t(m) * ds + size_t(test::random_int(0, ds - 1))] =
          std::ldexp(test::random_int(0, 1) ? 1.0f : -1.0f, test::random_int(-1, 2));
  for (bool score_dot : {true, false}) {
    struct Flat {
      std::vector<int32_t> index, size;
      std::vector<uint16_t> score;
      std::vector<int> admit;
    };
    Flat with{std::vector<int32_t>(size_t(M) * C * L), std::vector<int32_t>(size_t(M) * C, 0),
              std::vector<uint16_t>(size_t(M) * C * L), std::vector<int>(size_t(M) * C, INT_MIN)};
    Flat without = with;
    for (int i = 0; i < n; ++i)
      for (Flat* f : {&with, &without})
        cpu::cs_insert({.head_dim = d, .subspaces = M, .centroids = C, .list_capacity = L, .score_dot = score_dot,
                        .centroids_data = centroids.data(), .list_index = f->index.data(),
                        .list_score = f->score.data(), .list_size = f->size.data(),
                        .admit = f == &with ? f->admit.data() : nullptr, .key = keys.data() + size_t(i) * d,
                        .position = i});
    for (int l = 0; l < M * C; ++l) {
      const int m = l / C;
      std::vector<std::pair<float, int>> all;  // the definition: every key's score, best first, stable
      for (int i = 0; i < n; ++i) {
        float s = 0;
        for (int j = 0; j < ds; ++j) {
          const float k = keys[size_t(i) * d + size_t(m) * ds + j];
          s += centroids[size_t(l) * ds + j] * (score_dot ? k : (k > 0 ? 1.0f : k < 0 ? -1.0f : 0.0f));
        }
        all.push_back({s, i});
      }
      std::stable_sort(all.begin(), all.end(), [](auto a, auto b) { return a.first > b.first; });
      for (Flat* f : {&with, &without}) {
        TopList list(f->index.data() + size_t(l) * L, f->score.data() + size_t(l) * L, &f->size[size_t(l)], L);
        const std::vector<TopList::Entry> got = list.sorted();
        ASSERT_EQ(got.size(), size_t(L));
        for (int j = 0; j < L; ++j) {
          EXPECT_EQ(got[size_t(j)].score, all[size_t(j)].first) << "list " << l << " entry " << j;
          EXPECT_EQ(got[size_t(j)].index, all[size_t(j)].second) << "list " << l << " entry " << j;
        }
      }
    }
  }
}

// Lists laid out with a stride larger than their capacity (the GPU's tables: one stride for every
// sequence, each its own capacity) hold what packed lists hold, through the build and the inserts.
TEST(CsKernels, StridedListsHoldWhatPackedListsHold) {
  const int d = 32, M = 2, C = 4, ds = d / M, L = 9, S = 13, ps = 16, num_keys = 70, kv = 2, h = 1, nv = 50;
  const int pages = (num_keys + 30 + ps - 1) / ps;
  std::vector<float> pool = test::random_vector(size_t(pages) * kv * ps * d);
  std::vector<int32_t> page_ids(static_cast<size_t>(pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), test::rng());
  const std::vector<float> vectors = test::random_vector(size_t(nv) * d);
  struct Tables {
    std::vector<float> centroids, tail;
    std::vector<int32_t> index, size;
    std::vector<uint16_t> score;
  };
  const auto make = [&](int stride) {
    return Tables{std::vector<float>(size_t(M) * C * ds), std::vector<float>(size_t(M) * C),
                  std::vector<int32_t>(size_t(M) * C * stride, -1), std::vector<int32_t>(size_t(M) * C, 0),
                  std::vector<uint16_t>(size_t(M) * C * stride, 0)};
  };
  for (bool score_dot : {true, false}) {
    Tables packed = make(L), strided = make(S);
    for (auto [t, stride] : {std::pair{&packed, 0}, std::pair{&strided, S}}) {
      for (int m = 0; m < M; ++m)
        cpu::cs_build({.head_dim = d, .subspaces = M, .centroids = C, .iters = 4, .max_points = 64, .list_capacity = L,
                       .list_stride = stride, .score_dot = score_dot, .subspace = m, .vectors = vectors.data(),
                       .num_vectors = nv, .k_pool = pool.data(), .pages = page_ids.data(), .page_size = ps,
                       .num_kv_heads = kv, .kv_head = h, .num_keys = num_keys, .centroids_out = t->centroids.data(),
                       .list_index = t->index.data(), .list_score = t->score.data(), .list_size = t->size.data(),
                       .tail = t->tail.data()});
      for (int p = num_keys; p < num_keys + 30; ++p) {  // the keys decoding appends
        const float* key = pool.data() + ((size_t(page_ids[size_t(p / ps)]) * kv + h) * ps + p % ps) * d;
        cpu::cs_insert({.head_dim = d, .subspaces = M, .centroids = C, .list_capacity = L, .list_stride = stride,
                        .score_dot = score_dot, .centroids_data = t->centroids.data(), .list_index = t->index.data(),
                        .list_score = t->score.data(), .list_size = t->size.data(), .key = key, .position = p});
      }
    }
    EXPECT_EQ(strided.centroids, packed.centroids);
    EXPECT_EQ(strided.tail, packed.tail);
    ASSERT_EQ(strided.size, packed.size);
    for (int l = 0; l < M * C; ++l)
      for (int j = 0; j < packed.size[size_t(l)]; ++j) {
        ASSERT_EQ(strided.index[size_t(l) * S + j], packed.index[size_t(l) * L + j]) << "list " << l;
        ASSERT_EQ(strided.score[size_t(l) * S + j], packed.score[size_t(l) * L + j]) << "list " << l;
      }
    for (int l = 0; l < M * C; ++l)  // past each list's capacity the stride's slots stay untouched
      for (int j = L; j < S; ++j) ASSERT_EQ(strided.index[size_t(l) * S + j], -1);
  }
  // A stride below the capacity is refused.
  std::vector<float> c(size_t(M) * C * ds);
  std::vector<int32_t> idx(size_t(M) * C * L), sz(size_t(M) * C);
  std::vector<uint16_t> sc(idx.size());
  EXPECT_THROW(cpu::cs_insert({.head_dim = d, .subspaces = M, .centroids = C, .list_capacity = L, .list_stride = L - 1,
                               .centroids_data = c.data(), .list_index = idx.data(), .list_score = sc.data(),
                               .list_size = sz.data(), .key = vectors.data(), .position = 0}),
               std::invalid_argument);
}

// The GPU's streamed prompt sample (CsSampleRoom, cuda::CsState): chunks of any sizes offered
// to a room of R vectors, the sample emulated as the device keeps it (vector v written at
// index v / stride when v is a multiple of the stride; a halving copies index 2i to i in
// ascending i, as cs_halve_samples' threads do): after every chunk it holds exactly every
// stride-th vector offered, at most R of them, and the stride is the least power of two that
// fits them.
TEST(CsSampleRoom, KeepsEveryStrideThVectorWithinItsRoom) {
  for (int trial = 0; trial < 50; ++trial) {
    const long room = test::random_int(4, 300);
    CsSampleRoom r{.room = room};
    std::vector<long> buffer(static_cast<size_t>(room), -1);
    long offered = 0;
    for (int chunk = 0; chunk < 30; ++chunk) {
      const long n = test::random_int(1, 97) * (test::random_int(0, 4) == 0 ? 20 : 1);
      for (long kept : r.offer(n))
        for (long i = 1; 2 * i < kept; ++i) buffer[size_t(i)] = buffer[size_t(2 * i)];
      for (long v = offered; v < offered + n; ++v)
        if (v % r.stride == 0) {
          ASSERT_LT(v / r.stride, room) << "trial " << trial;
          buffer[size_t(v / r.stride)] = v;
        }
      offered += n;
      ASSERT_EQ(r.vectors, offered);
      ASSERT_LE(r.kept(), room);
      ASSERT_TRUE(r.stride == 1 || (offered + r.stride / 2 - 1) / (r.stride / 2) > room) << "the least stride";
      for (long i = 0; i < r.kept(); ++i) ASSERT_EQ(buffer[size_t(i)], i * r.stride) << "trial " << trial << ", index " << i;
    }
  }
}

TEST(CsSelect, RefusesAWindowPastItsContext) {
  const test::CsTables t = test::random_cs_tables(2, 4, 8, 4, 20);
  const CsTablesView v = t.view();
  const std::vector<float> q = test::random_vector(16);
  const int32_t context = 20, wb = 21, n = 3;
  int32_t picks[32], count = 0;
  cpu::CsSelectScratch scratch;
  EXPECT_THROW(cpu::cs_select({.searches = 1, .head_dim = 16, .subspaces = 2, .centroids = 4, .list_capacity = 4,
                               .queries = q.data(), .tables = &v, .context = &context, .window_begin = &wb,
                               .n_pick = &n, .max_picks = 32, .picks = picks, .pick_counts = &count},
                              scratch),
               std::invalid_argument);
  // The build refuses an empty prompt and a subspace out of range (its tables are covered through
  // the policy: CsSelector.ListsHoldTheTopScoresAndTheirTailMean).
  EXPECT_THROW(cpu::cs_build({.head_dim = 16, .subspaces = 2, .centroids = 4, .max_points = 8, .list_capacity = 4,
                              .subspace = 0, .num_vectors = 0, .num_keys = 5}),
               std::invalid_argument);
  EXPECT_THROW(cpu::cs_build({.head_dim = 16, .subspaces = 2, .centroids = 4, .max_points = 8, .list_capacity = 4,
                              .subspace = 2, .num_vectors = 3, .num_keys = 5}),
               std::invalid_argument);
}

}  // namespace
}  // namespace skim
