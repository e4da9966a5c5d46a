// cuda::cs_select against its CPU reference, cpu::cs_select (which tests/attention/
// cs_kernels_test.cpp holds to the definition), on fresh random tables and queries: head_dim
// 128 in 4 subspaces of 64 centroids, lists of up to 6000 keys, contexts from 500 to 530,000
// (sort keys staged in shared memory and read from global memory; the pick's packing of the sum
// CTAs' segments in one round and in two), several searches per call,
// by position and by score, with and without the back-off. The same pick counts, candidates
// and statistics; the picks may differ only where fp32 sums of another order break a near-tie
// differently, so their differing count is reported and must stay small. The workspace is left
// zero: a second call on it gives the same picks and candidates. Skipped searches write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "../cs_tables_case.h"
#include "../test_random.h"
#include "backend/cpu/cs_kernels.h"
#include "backend/cuda/cs_select.cuh"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

// The tables' arrays on the device and the views over them.
struct DeviceTables {
  std::vector<cuda::DeviceBuffer<float>> floats;
  std::vector<cuda::DeviceBuffer<int32_t>> ints;
  std::vector<cuda::DeviceBuffer<uint16_t>> scores;
  std::vector<CsTablesView> views;

  explicit DeviceTables(const std::vector<test::CsTables>& tables) {
    for (const test::CsTables& t : tables) {
      floats.push_back(to_device(t.centroids));
      floats.push_back(to_device(t.tail));
      ints.push_back(to_device(t.index));
      ints.push_back(to_device(t.size));
      scores.push_back(to_device(t.score));
      views.push_back({floats[floats.size() - 2].data(), ints[ints.size() - 2].data(), scores.back().data(),
                       ints.back().data(), floats.back().data()});
    }
  }
};

// Positions in one sorted list and not the other.
int differing(std::vector<int32_t> a, std::vector<int32_t> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::vector<int32_t> d;
  std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(d));
  return int(d.size());
}

TEST(CudaCsSelect, MatchesTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  // Lists of up to 6000 keys: with the back-off, search 2 packs more touched positions than the
  // select stages in shared memory (10,240), so both of its key sources run.
  const int d = 128, M = 4, C = 64, L = 6000, searches = 6;
  for (bool by_score : {false, true})
    for (double backoff : {-1.0, 0.5}) {
      std::vector<test::CsTables> tables;
      std::vector<int32_t> context, wb, n_pick;
      for (int s = 0; s < searches; ++s) {
        // Search 0 past 512 sum segments (524,288 positions): the pick packs them in two rounds.
        context.push_back(s == 0 ? 530000 : s == 2 ? 20000 : test::random_int(500, 12000));
        tables.push_back(test::random_cs_tables(M, C, d / M, L, context.back()));
        wb.push_back(std::max(0, context.back() - 64));
        n_pick.push_back(s == 1 ? 0 : test::random_int(1, 900));
      }
      std::vector<CsTablesView> host_views;
      for (const test::CsTables& t : tables) host_views.push_back(t.view());
      const std::vector<float> q = test::random_vector(size_t(searches) * d);
      const int max_picks = *std::max_element(wb.begin(), wb.end());
      const int max_context = *std::max_element(context.begin(), context.end());
      CsSelectArgs cpu_args{.searches = searches, .head_dim = d, .subspaces = M, .centroids = C, .list_capacity = L,
                            .score_dot = true, .missing_mean = true, .by_score = by_score, .backoff = backoff,
                            .backoff_top = 2, .queries = q.data(), .tables = host_views.data(),
                            .context = context.data(), .window_begin = wb.data(), .n_pick = n_pick.data(),
                            .max_picks = max_picks, .candidate_stride = max_context};
      std::vector<int32_t> want(size_t(searches) * max_picks, -1), want_counts(searches, -1);
      std::vector<uint8_t> want_candidates(size_t(searches) * max_context, 0);
      CsSelectStats want_stats;
      cpu::CsSelectScratch scratch;
      CsSelectArgs c = cpu_args;
      c.picks = want.data();
      c.pick_counts = want_counts.data();
      c.candidates = want_candidates.data();
      c.stats = &want_stats;
      cpu::cs_select(c, scratch);

      DeviceTables dt(tables);
      auto views = to_device(dt.views);
      auto dq = to_device(q);
      auto dctx = to_device(context), dwb = to_device(wb), dn = to_device(n_pick);
      cuda::DeviceBuffer<int32_t> picks(want.size()), counts(searches);
      cuda::DeviceBuffer<uint8_t> candidates(want_candidates.size());
      auto stats = to_device(std::vector<CsSelectStats>(1));
      CsSelectArgs g = cpu_args;
      g.queries = dq.data();
      g.tables = views.data();
      g.context = dctx.data();
      g.window_begin = dwb.data();
      g.n_pick = dn.data();
      g.picks = picks.data();
      g.pick_counts = counts.data();
      g.candidates = candidates.data();
      g.stats = stats.data();
      const size_t ws_bytes = cuda::cs_select_workspace_size(g, max_context);
      ASSERT_GT(ws_bytes, 0u);
      cuda::DeviceBuffer<uint8_t> ws(ws_bytes);
      ASSERT_EQ(cudaMemset(ws.data(), 0, ws_bytes), cudaSuccess);
      const cuda::CsSelectWorkspace workspace{ws.data(), ws_bytes, max_context};
      ASSERT_EQ(cuda::cs_select(g, workspace, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<int32_t> got = to_host(picks), got_counts = to_host(counts);
      const CsSelectStats got_stats = to_host(stats)[0];

      EXPECT_EQ(got_counts, want_counts);
      EXPECT_EQ(to_host(candidates), want_candidates) << "the keys the chosen lists hold";
      int picked = 0, differ = 0, misordered = 0;
      for (int s = 0; s < searches; ++s) {
        const auto row = [&](const std::vector<int32_t>& v) {
          return std::vector<int32_t>(v.begin() + std::ptrdiff_t(s) * max_picks,
                                      v.begin() + std::ptrdiff_t(s) * max_picks + want_counts[size_t(s)]);
        };
        const std::vector<int32_t> x = row(got), y = row(want);
        picked += int(y.size());
        differ += differing(x, y);
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) misordered += x[i] != y[i];
        if (!by_score) {
          EXPECT_TRUE(std::is_sorted(x.begin(), x.end())) << "search " << s << ": in position order";
        }
      }
      std::printf("[ cs       ] %s, backoff %g: %d of %d picks differ from the CPU reference (near-ties), %d placed "
                  "differently\n",
                  by_score ? "by score" : "by position", backoff, differ, picked, misordered);
      EXPECT_LE(differ, std::max(2, picked / 200));
      EXPECT_LE(misordered, std::max(4, picked / 50));
      EXPECT_EQ(got_stats.subspace_searches, want_stats.subspace_searches);
      EXPECT_EQ(got_stats.backoffs, want_stats.backoffs);
      EXPECT_EQ(got_stats.table_bytes, want_stats.table_bytes);
      EXPECT_EQ(got_stats.candidates, want_stats.candidates);
      EXPECT_NEAR(got_stats.best_cos, want_stats.best_cos, 1e-4 * searches * M);

      // The workspace's masks and counts are left zero: a second call on it gives the same.
      ASSERT_EQ(cuda::cs_select(g, workspace, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(to_host(picks), got) << "a second call differs";
      EXPECT_EQ(to_host(counts), got_counts) << "a second call differs";
      EXPECT_EQ(to_host(candidates), want_candidates) << "a second call's candidates differ";

      // Odd searches skipped (a search period): they write nothing, the others pick as before.
      std::vector<uint8_t> skip(searches);
      for (int s = 0; s < searches; ++s) skip[size_t(s)] = s % 2;
      auto dskip = to_device(skip);
      const std::vector<int32_t> sentinel(want.size(), -5), sentinel_counts(searches, -5);
      ASSERT_EQ(cudaMemcpy(picks.data(), sentinel.data(), picks.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(counts.data(), sentinel_counts.data(), counts.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
      CsSelectArgs some = g;
      some.skip = dskip.data();
      some.candidates = nullptr;
      some.stats = nullptr;
      ASSERT_EQ(cuda::cs_select(some, workspace, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<int32_t> some_picks = to_host(picks), some_counts = to_host(counts);
      for (int s = 0; s < searches; ++s) {
        const auto row = [&](const std::vector<int32_t>& v, int n) {
          return std::vector<int32_t>(v.begin() + std::ptrdiff_t(s) * max_picks, v.begin() + std::ptrdiff_t(s) * max_picks + n);
        };
        if (s % 2) {
          EXPECT_EQ(some_counts[size_t(s)], -5) << "search " << s << " was skipped";
          EXPECT_EQ(row(some_picks, max_picks), row(sentinel, max_picks)) << "search " << s << " was skipped";
        } else {
          EXPECT_EQ(some_counts[size_t(s)], got_counts[size_t(s)]) << "search " << s;
          EXPECT_EQ(row(some_picks, got_counts[size_t(s)]), row(got, got_counts[size_t(s)])) << "search " << s;
        }
      }
    }
}

TEST(CudaCsSelect, RefusesWhatItCannotRun) {
  CsSelectArgs a{.searches = 1, .head_dim = 128, .subspaces = 3, .centroids = 64, .list_capacity = 10};
  EXPECT_EQ(cuda::cs_select_workspace_size(a, 100), 0u) << "head_dim not divisible by subspaces";
  a.subspaces = 4;
  a.centroids = 1000;
  EXPECT_EQ(cuda::cs_select_workspace_size(a, 100), 0u) << "more centroids than a CTA scores";
  a.centroids = 64;
  EXPECT_GT(cuda::cs_select_workspace_size(a, 100), 0u);
  EXPECT_EQ(cuda::cs_select(a, {nullptr, 0, 100}, nullptr), cudaErrorInvalidValue) << "no workspace";
}

}  // namespace
}  // namespace skim
