// MAC-Attention through the pipeline on random one-layer sequences: a miss equals dense, a hit
// equals equation (7) of seeds/002 evaluated by brute force, and the state cached for m is the
// state over [1, m-r] (1-based, rounded down to a page: mac_prefix_end) built without
// subtraction.
#include "attention/mac.h"

#include <gtest/gtest.h>

#include "attention/mac_decode_args.h"
#include "attention/pipeline.h"
#include "decode_harness.h"

namespace skim {
namespace {

using test::DecodeHarness;

constexpr int kPage = 16;  // the harness's page size

// The end of the prefix cached for the token at `pos`.
int prefix_of(int pos, int band) { return mac_prefix_end(pos, band, kPage); }

const MacReuse& mac_of(const AttentionPolicy& p) {
  const MacReuse* m = dynamic_cast<const PipelinePolicy&>(p).mac();
  EXPECT_NE(m, nullptr);
  return *m;
}

// (o, lse) of two disjoint states merged, in double: equation (7)'s (S_a + S_b) / (Z_a + Z_b).
void merge_double(std::vector<double>& o, double& lse, const std::vector<double>& ob, double lseb) {
  if (lseb == -INFINITY) return;
  if (lse == -INFINITY) {
    o = ob;
    lse = lseb;
    return;
  }
  const double m = std::max(lse, lseb), wa = std::exp(lse - m), wb = std::exp(lseb - m);
  for (size_t i = 0; i < o.size(); ++i) o[i] = (wa * o[i] + wb * ob[i]) / (wa + wb);
  lse = m + std::log(wa + wb);
}

TEST(Mac, NoHitsEqualsDense) {
  // tau near 1: the threshold is 1% of sqrt(2d), which random queries never reach.
  auto policy = make_policy("mac:tau=0.99,window=64,band=32,min_context=0");
  DecodeHarness h(400, 2, 3, 32);
  h.prefill(*policy, 200);
  for (int s = 0; s < 20; ++s) {
    std::vector<float> o = h.step(*policy), dense = h.dense_newest();
    EXPECT_LT(test::max_abs_diff(o.data(), dense.data(), o.size()), 1e-5f) << "step " << s;
  }
  auto c = policy->counters();
  EXPECT_EQ(c.at("mac_hit_rate"), 0.0);
  EXPECT_EQ(mac_of(*policy).ring_size(&h.table, 0), 64);
}

TEST(Mac, MissCachesStateOverPrefix) {
  const int band = test::random_int(8, 60);
  auto policy = make_policy("mac:tau=0.99,window=32,min_context=0,band=" + std::to_string(band));
  DecodeHarness h(300, 2, 2, 32);
  h.prefill(*policy, test::random_int(30, 150));
  for (int s = 0; s < 10; ++s) {
    h.step(*policy);
    const int m = h.table.length - 1;
    for (int head = 0; head < h.heads; ++head) {
      std::vector<double> o;
      double lse;
      h.brute_state(h.q[size_t(m)].data() + head * h.d, head / h.group, 0, prefix_of(m, band), o, lse);
      auto e = mac_of(*policy).newest(&h.table, 0, head, h.d);
      EXPECT_EQ(e.pos, m);
      if (prefix_of(m, band) == 0) {
        EXPECT_EQ(e.lse, kEmptyLse);
        continue;
      }
      EXPECT_NEAR(e.lse, lse, 1e-4) << "head " << head;
      for (int i = 0; i < h.d; ++i) EXPECT_NEAR(e.o[i], o[size_t(i)], 1e-5) << "head " << head;
    }
  }
}

// The ring entries of prompt rows get their states from the prefill's own attention, in
// whatever chunks the prompt comes: each must be the state of the row's post-RoPE query over
// [0, p+1-r) by the definition.
TEST(Mac, PrefillStatesEqualBruteForce) {
  const int band = test::random_int(1, 90), window = test::random_int(20, 120), prompt = test::random_int(150, 300);
  auto policy = make_policy("mac:min_context=0,window=" + std::to_string(window) + ",band=" + std::to_string(band));
  DecodeHarness h(400, 2, 3, 32);
  for (int i = 0; i < prompt; ++i) h.add_token();
  for (int first = 0; first < prompt;) {  // chunks of random length
    const int n = std::min(prompt - first, test::random_int(1, 100));
    AttentionBatch b = h.batch(first, n, false);
    policy->attend(b);
    first += n;
  }
  const MacReuse& mac = mac_of(*policy);
  ASSERT_EQ(mac.ring_size(&h.table, 0), std::min(window, prompt));
  for (int i = 0; i < mac.ring_size(&h.table, 0); ++i)
    for (int head = 0; head < h.heads; ++head) {
      auto e = mac.entry(&h.table, 0, i, head, h.d);
      EXPECT_EQ(e.pos, prompt - mac.ring_size(&h.table, 0) + i);
      std::vector<double> o;
      double lse;
      h.brute_state(h.q[size_t(e.pos)].data() + head * h.d, head / h.group, 0, prefix_of(e.pos, band), o, lse);
      if (prefix_of(e.pos, band) == 0) {
        EXPECT_EQ(e.lse, kEmptyLse);
        continue;
      }
      EXPECT_NEAR(e.lse, lse, 1e-4) << "entry " << i << " head " << head;
      for (int k = 0; k < h.d; ++k) EXPECT_NEAR(e.o[k], o[size_t(k)], 1e-5) << "entry " << i << " head " << head;
    }
}

// Decode queries whose pre-RoPE query repeats a ring entry's exactly: every head hits it.
TEST(Mac, HitEqualsEquation7) {
  const int band = test::random_int(4, 40), window = 64, prompt = test::random_int(120, 250);
  auto policy = make_policy("mac:tau=0.45,window=64,min_context=0,band=" + std::to_string(band));
  DecodeHarness h(400, 2, 2, 32);
  h.prefill(*policy, prompt);
  for (int s = 0; s < 12; ++s) {
    // A distinct prompt position in the ring for each step, so the nearest entry is unique.
    const int p = prompt - window + 1 + 4 * s + test::random_int(0, 3);
    h.add_token();
    h.q_pre.back() = h.q_pre[size_t(p)];
    AttentionBatch b = h.batch(h.table.length - 1, 1, true);
    policy->attend(b);
    const int m = h.table.length - 1, prefix = prefix_of(p, band);
    for (int head = 0; head < h.heads; ++head) {
      const int kvh = head / h.group;
      std::vector<double> op, om, oc;
      double lp, lm, lc;
      h.brute_state(h.q[size_t(p)].data() + head * h.d, kvh, 0, prefix, op, lp);        // S, Z of p over [1, p-r]
      h.brute_state(h.q[size_t(m)].data() + head * h.d, kvh, prefix, m + 1, om, lm);    // S, Z of m over [p-r+1, m]
      h.brute_state(h.q[size_t(m)].data() + head * h.d, kvh, prefix, prefix_of(m, band), oc, lc);  // [p-r+1, m-r]
      std::vector<double> out = op, cache = op;
      double lo = lp, lcache = lp;
      merge_double(out, lo, om, lm);
      merge_double(cache, lcache, oc, lc);
      for (int i = 0; i < h.d; ++i)
        EXPECT_NEAR(h.out[size_t(head) * h.d + i], out[size_t(i)], 1e-5) << "step " << s << " head " << head;
      auto e = mac_of(*policy).newest(&h.table, 0, head, h.d);
      EXPECT_NEAR(e.lse, lcache, 1e-4);
      for (int i = 0; i < h.d; ++i) EXPECT_NEAR(e.o[i], cache[size_t(i)], 1e-5) << "cached, step " << s;
    }
  }
  auto c = policy->counters();
  EXPECT_EQ(c.at("mac_hit_rate"), 1.0);
  EXPECT_GT(c.at("mac_skipped"), 0.0);
  EXPECT_LT(c.at("mac_dist_p50"), 0.02);  // the copies are at distance 0
  const auto& st = mac_of(*policy).head_stats();
  ASSERT_EQ(st.size(), 1u);
  for (const MacHeadStats& x : st[0]) EXPECT_EQ(x.hits, x.decisions);
}

// A hit whose band reaches the first key reads everything: the output is dense's.
TEST(Mac, ShortPrefixHitIsDense) {
  auto policy = make_policy("mac:band=64,min_context=0");
  DecodeHarness h(200, 1, 4, 16);
  h.prefill(*policy, 40);
  h.add_token();
  h.q_pre.back() = h.q_pre[30];
  AttentionBatch b = h.batch(h.table.length - 1, 1, true);
  policy->attend(b);
  std::vector<float> o = h.out, dense = h.dense_newest();
  EXPECT_LT(test::max_abs_diff(o.data(), dense.data(), o.size()), 1e-5f);
  EXPECT_EQ(policy->counters().at("mac_hit_rate"), 1.0);
  EXPECT_EQ(policy->counters().at("mac_skipped"), 0.0);
}

TEST(Mac, ComposedSelectorMissesUseSelection) {
  // With no hits, quest+mac is quest.
  auto mq = make_policy("quest:budget=64,dense_layers=0+mac:tau=0.99,band=16,min_context=0");
  auto q = make_policy("quest:budget=64,dense_layers=0");
  DecodeHarness h(400, 2, 2, 32);
  h.prefill(*mq, 250);
  {
    AttentionBatch b = h.batch(0, 250, false);
    q->attend(b);
  }
  for (int s = 0; s < 5; ++s) {
    std::vector<float> a = h.step(*mq);
    AttentionBatch b = h.batch(h.table.length - 1, 1, true);
    q->attend(b);
    EXPECT_LT(test::max_abs_diff(a.data(), h.out.data(), a.size()), 1e-5f);
  }
}

// Steps where some heads repeat a ring entry's pre-RoPE query (hits) and the others are new
// (misses), so hits and misses share KV groups. A miss head's query is scaled far from every
// entry (a random query near an entry by chance would hit).
void mixed_step(DecodeHarness& h, int step, int prompt, int window, const std::vector<bool>& hit_heads) {
  h.add_token();
  const int p = prompt - window + 1 + 3 * step;
  for (int head = 0; head < h.heads; ++head) {
    float* q = h.q_pre.back().data() + head * h.d;
    if (hit_heads[size_t(head)])
      std::copy_n(h.q_pre[size_t(p)].begin() + head * h.d, h.d, q);
    else
      for (int i = 0; i < h.d; ++i) q[i] *= 8.0f;
  }
}

// The plan + kernel path (a base that plans pages) and the per-head path (art never stopping)
// give the same outputs and ring states, hits and misses mixed in a group, up to fp32 rounding.
TEST(Mac, PlanPathEqualsThePerHeadPath) {
  const int band = test::random_int(1, 70), window = 48, prompt = test::random_int(120, 260);
  const std::string spec = "mac:tau=0.45,window=48,min_context=0,band=" + std::to_string(band);
  auto plan = make_policy(spec);
  auto heads = make_policy(spec + "+art:patience=1000000,order=recent");
  DecodeHarness h(400, 2, 3, 32);
  h.prefill(*plan, prompt);
  {
    AttentionBatch b = h.batch(0, prompt, false);
    heads->attend(b);
  }
  std::vector<bool> hit_heads(size_t(h.heads));
  for (int s = 0; s < 10; ++s) {
    for (size_t i = 0; i < hit_heads.size(); ++i) hit_heads[i] = test::random_int(0, 1) == 1;
    mixed_step(h, s, prompt, window, hit_heads);
    AttentionBatch b = h.batch(h.table.length - 1, 1, true);
    plan->attend(b);
    std::vector<float> a = h.out;
    heads->attend(b);
    EXPECT_LT(test::max_abs_diff(a.data(), h.out.data(), a.size()), 2e-5f) << "step " << s;
    for (int head = 0; head < h.heads; ++head) {
      auto x = mac_of(*plan).newest(&h.table, 0, head, h.d), y = mac_of(*heads).newest(&h.table, 0, head, h.d);
      ASSERT_EQ(x.lse == kEmptyLse, y.lse == kEmptyLse);
      if (x.lse == kEmptyLse) continue;
      EXPECT_NEAR(x.lse, y.lse, 2e-5);
      EXPECT_LT(test::max_abs_diff(x.o, y.o, size_t(h.d)), 2e-5f) << "ring state, step " << s << " head " << head;
    }
  }
  EXPECT_EQ(plan->counters().at("mac_hit_rate"), heads->counters().at("mac_hit_rate"));
  EXPECT_GT(plan->counters().at("mac_hit_rate"), 0.0);
  EXPECT_LT(plan->counters().at("mac_hit_rate"), 1.0);
}

// quest+mac with hits and misses in the same groups: a hit head is equation (7), a miss head is
// quest's own output for that head.
TEST(Mac, ComposedSelectorHitsAndMissesShareAGroup) {
  const int band = 32, window = 64, prompt = 250;
  auto mq = make_policy("quest:budget=64,min=0,dense_layers=0+mac:tau=0.45,window=64,band=32,min_context=0");
  auto q = make_policy("quest:budget=64,min=0,dense_layers=0");
  DecodeHarness h(400, 2, 3, 32);
  h.prefill(*mq, prompt);
  {
    AttentionBatch b = h.batch(0, prompt, false);
    q->attend(b);
  }
  std::vector<bool> hit_heads(size_t(h.heads));
  for (int s = 0; s < 8; ++s) {
    for (size_t i = 0; i < hit_heads.size(); ++i) hit_heads[i] = (i + size_t(s)) % 2 == 0;
    mixed_step(h, s, prompt, window, hit_heads);
    AttentionBatch b = h.batch(h.table.length - 1, 1, true);
    mq->attend(b);
    const std::vector<float> a = h.out;
    q->attend(b);
    const int m = h.table.length - 1, p = prompt - window + 1 + 3 * s;
    for (int head = 0; head < h.heads; ++head) {
      const float* got = a.data() + size_t(head) * h.d;
      if (!hit_heads[size_t(head)]) {
        EXPECT_LT(test::max_abs_diff(got, h.out.data() + size_t(head) * h.d, size_t(h.d)), 2e-5f) << "miss, head " << head;
        continue;
      }
      std::vector<double> op, om;
      double lp, lm;
      h.brute_state(h.q[size_t(p)].data() + head * h.d, head / h.group, 0, prefix_of(p, band), op, lp);
      h.brute_state(h.q[size_t(m)].data() + head * h.d, head / h.group, prefix_of(p, band), m + 1, om, lm);
      merge_double(op, lp, om, lm);
      for (int i = 0; i < h.d; ++i) EXPECT_NEAR(got[i], op[size_t(i)], 1e-5) << "hit, head " << head;
    }
  }
}

TEST(Mac, ForkCopiesRingsAndForgetDrops) {
  auto policy = make_policy("mac:window=16");
  DecodeHarness h(100, 1, 2, 16);
  h.prefill(*policy, 30);
  PageTable other;
  policy->fork(&h.table, &other);
  EXPECT_EQ(mac_of(*policy).ring_size(&other, 0), 16);
  policy->forget(&h.table);
  EXPECT_EQ(mac_of(*policy).ring_size(&h.table, 0), 0);
}

TEST(Mac, ParameterErrors) {
  EXPECT_THROW(make_policy("mac:tau=1"), Error);
  EXPECT_THROW(make_policy("mac:window=0"), Error);
  EXPECT_THROW(make_policy("mac:band=-1"), Error);
  EXPECT_THROW(make_policy("mac+resa"), Error);
  EXPECT_THROW(make_policy("quest+mac+retro"), Error);
  EXPECT_THROW(make_policy("mac:k=3"), Error);
  EXPECT_NO_THROW(make_policy("quest+mac"));
  EXPECT_NO_THROW(make_policy("gbsa+mac:tau=0.75"));
}

}  // namespace
}  // namespace skim
