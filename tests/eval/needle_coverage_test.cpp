// The needle coverage meter (eval/needle_coverage.h) against its definition: dense softmax mass
// on the needle's tokens, and the part of it inside the keys a selector chose, computed here
// from the keys directly for a selector whose choice is known (streaming: sinks + window).
#include "eval/needle_coverage.h"

#include <gtest/gtest.h>

#include "../attention/decode_harness.h"

namespace skim::eval {
namespace {

// Dense probabilities of query `q` over every key of KV head `kvh`, in double.
std::vector<double> softmax_over_keys(test::DecodeHarness& h, const float* q, int kvh) {
  std::vector<double> s;
  double m = -INFINITY;
  for (int t = 0; t < h.table.length; ++t) {
    const float* k = h.cache.key(0, h.table, t, kvh);
    double x = 0;
    for (int i = 0; i < h.d; ++i) x += double(q[i]) * k[i];
    s.push_back(x / std::sqrt(double(h.d)));
    m = std::max(m, s.back());
  }
  double z = 0;
  for (double& x : s) z += (x = std::exp(x - m));
  for (double& x : s) x /= z;
  return s;
}

struct Expected {
  double needle = 0, kept_needle = 0, kept = 0;
};

// Sums over the query heads of the newest token, with kept(t) the selection's membership.
template <class Kept>
Expected expected(test::DecodeHarness& h, TokenSpan needle, Kept kept) {
  Expected e;
  const float* q = h.q.back().data();
  for (int head = 0; head < h.heads; ++head) {
    std::vector<double> p = softmax_over_keys(h, q + size_t(head) * h.d, head / h.group);
    for (int t = 0; t < h.table.length; ++t) {
      if (kept(t)) e.kept += p[size_t(t)];
      if (t >= needle.begin && t < needle.end) {
        e.needle += p[size_t(t)];
        if (kept(t)) e.kept_needle += p[size_t(t)];
      }
    }
  }
  return e;
}

TEST(NeedleCoverage, MeasuresTheNeedleMassInsideTheSelection) {
  test::DecodeHarness h(256, 2, 3, 16);
  auto policy = make_policy("streaming:sink=4,window=32");
  h.prefill(*policy, 100);
  const TokenSpan needle{60, 76};  // partly inside the window of the step at position 100
  NeedleCoverageMeter meter;
  meter.attach(*policy, needle);
  h.step(*policy);
  NeedleCoverageMeter::detach(*policy);

  // Context 101, pages of 16: the window's tokens [69, 101) lie in pages 4-6, [64, 101); the
  // 4 sinks in page 0, [0, 16) (streaming keeps whole pages).
  ASSERT_EQ(h.table.length, 101);
  Expected e = expected(h, needle, [&](int t) { return t < 16 || t >= 64; });
  ASSERT_EQ(meter.layers().size(), 1u);
  const LayerCoverage& l = meter.layers()[0];
  EXPECT_EQ(l.samples, uint64_t(h.heads));
  EXPECT_EQ(l.steps, 1u);
  EXPECT_NEAR(l.needle_mass, e.needle, 1e-6);
  EXPECT_NEAR(l.kept_needle, e.kept_needle, 1e-6);
  EXPECT_NEAR(l.kept_mass, e.kept, 1e-6);
  EXPECT_GT(l.kept_needle, 0);
  EXPECT_LT(l.kept_needle, l.needle_mass);
}

TEST(NeedleCoverage, ADenseLayerKeepsEverything) {
  test::DecodeHarness h(128, 1, 4, 8);
  auto policy = make_policy("dense");
  h.prefill(*policy, 50);
  NeedleCoverageMeter meter;
  meter.attach(*policy, {10, 20});
  h.step(*policy);
  NeedleCoverageMeter::detach(*policy);
  Expected e = expected(h, {10, 20}, [](int) { return true; });
  const LayerCoverage& l = meter.layers()[0];
  EXPECT_NEAR(l.needle_mass, e.needle, 1e-6);
  EXPECT_NEAR(l.kept_needle, l.needle_mass, 1e-12);
  EXPECT_NEAR(l.kept_mass, double(h.heads), 1e-6);
  EXPECT_NEAR(l.top_kept, 1.0, 1e-12);
}

}  // namespace
}  // namespace skim::eval
