// ART's traversal: block plans, the stop rule, and through the pipeline: with a patience larger
// than the block count every base policy is unchanged.
#include "attention/art.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "attention/pipeline.h"
#include "attention/policy_spec.h"
#include "decode_harness.h"

namespace skim {
namespace {

using test::DecodeHarness;

int tokens(const std::vector<KeyRange>& r) {
  int n = 0;
  for (KeyRange x : r) n += x.end - x.begin;
  return n;
}

TEST(Art, BlockPlans) {
  ArtPlan a;
  art_blocks_in_order({{32, 48}, {0, 16}, {80, 96}, {16, 32}, {200, 210}}, 32, a);
  ASSERT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(a.blocks[0].size(), 2u);  // pages of one block need not be adjacent
  EXPECT_EQ(a.blocks[0][1].begin, 0);
  EXPECT_EQ(tokens(a.blocks[2]), 10);
  ArtPlan r;
  art_blocks_recent({5, 140}, 64, r);
  ASSERT_EQ(r.blocks.size(), 3u);
  EXPECT_EQ(r.blocks[0][0].begin, 76);
  EXPECT_EQ(r.blocks[0][0].end, 140);
  EXPECT_EQ(r.blocks[2][0].begin, 5);
  EXPECT_EQ(r.blocks[2][0].end, 12);
}

// A random sequence and a plan of random disjoint ranges of it, in random order.
struct Fixture {
  DecodeHarness h{600, 1, 1, 32};
  ArtPlan plan;
  std::vector<KeyRange> all;
  Fixture() {
    for (int i = 0; i < 500; ++i) h.add_token();
    for (int b = 0; b < 500; b += 20)
      if (test::random_int(0, 2) > 0) all.push_back({b, b + test::random_int(1, 20)});
    std::shuffle(all.begin(), all.end(), test::rng());
    art_blocks_in_order(all, 16, plan);  // about 10 blocks
  }
  SeqKV kv() const { return SeqKV{h.cache.layer(0), h.table.pages.data(), 0}; }
};

TEST(Art, PatienceBeyondBlocksReadsAll) {
  Fixture f;
  ArtParams p;
  p.patience = int(f.plan.blocks.size()) + 1;
  p.eps_scale = 1e9;
  p.eps_dir = 2;  // every block is stable, but the patience is never reached
  std::vector<float> o(32, 0.0f), ref(32);
  float lse = kEmptyLse, ref_lse;
  ArtResult r = art_traverse(f.h.q[499].data(), f.kv(), 0.2f, 32, p, f.plan, o.data(), lse);
  std::sort(f.all.begin(), f.all.end(), [](KeyRange a, KeyRange b) { return a.begin < b.begin; });
  attend_reference(f.h.q[499].data(), 1, f.kv(), f.all, 0.2f, ref.data(), &ref_lse);
  EXPECT_LT(test::max_abs_diff(o.data(), ref.data(), 32), 1e-5f);
  EXPECT_NEAR(lse, ref_lse, 1e-4);
  EXPECT_EQ(r.visited, r.blocks);
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(tokens(r.read), tokens(f.all));
}

TEST(Art, StopsAfterPatienceStableBlocks) {
  Fixture f;
  ArtParams p;
  p.patience = test::random_int(1, 3);
  p.eps_scale = 1e9;
  p.eps_dir = 2;  // every block after the first is stable (the first has nothing to compare)
  std::vector<float> o(32, 0.0f), ref(32);
  float lse = kEmptyLse, ref_lse;
  ArtResult r = art_traverse(f.h.q[499].data(), f.kv(), 0.2f, 32, p, f.plan, o.data(), lse);
  EXPECT_EQ(r.visited, p.patience + 1);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.probe_stop, r.full_stop);  // d = 32: the probe is the full vector
  EXPECT_EQ(r.stable_disagree, 0);
  std::vector<KeyRange> read;
  for (int j = 0; j < r.visited; ++j) read.insert(read.end(), f.plan.blocks[size_t(j)].begin(), f.plan.blocks[size_t(j)].end());
  std::sort(read.begin(), read.end(), [](KeyRange a, KeyRange b) { return a.begin < b.begin; });
  attend_reference(f.h.q[499].data(), 1, f.kv(), read, 0.2f, ref.data(), &ref_lse);
  EXPECT_LT(test::max_abs_diff(o.data(), ref.data(), 32), 1e-5f);
}

// In rounds of R blocks the state is tested only at a round's end, against the state of the
// round before: with every test stable but the first (nothing to compare), patience P stops
// after (P + 1) rounds, R (P + 1) blocks, and the output is the attention over exactly those.
TEST(Art, RoundsTestBetweenRounds) {
  Fixture f;
  f.plan = ArtPlan{};
  art_blocks_in_order({{0, 480}}, 16, f.plan);  // 30 blocks: enough for any round drawn
  ArtParams p;
  p.round = test::random_int(2, 4);
  p.patience = test::random_int(1, 2);
  p.eps_scale = 1e9;
  p.eps_dir = 2;
  std::vector<float> o(32, 0.0f), ref(32);
  float lse = kEmptyLse, ref_lse;
  ArtResult r = art_traverse(f.h.q[499].data(), f.kv(), 0.2f, 32, p, f.plan, o.data(), lse);
  EXPECT_EQ(r.visited, (p.patience + 1) * p.round);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.full_stop, (p.patience + 1) * p.round - 1);
  std::vector<KeyRange> read;
  for (int j = 0; j < r.visited; ++j) read.insert(read.end(), f.plan.blocks[size_t(j)].begin(), f.plan.blocks[size_t(j)].end());
  std::sort(read.begin(), read.end(), [](KeyRange a, KeyRange b) { return a.begin < b.begin; });
  attend_reference(f.h.q[499].data(), 1, f.kv(), read, 0.2f, ref.data(), &ref_lse);
  EXPECT_LT(test::max_abs_diff(o.data(), ref.data(), 32), 1e-5f);
}

TEST(Art, SplitStateCollectsKeysBelowSplitAndPinnedFirst) {
  Fixture f;
  ArtParams p;
  p.patience = 1000;
  f.plan.pinned = {{0, 0}};
  const int split = test::random_int(50, 450);
  std::vector<float> o(32, 0.0f), so(32, 0.0f), ref(32);
  float lse = kEmptyLse, slse = kEmptyLse, ref_lse;
  art_traverse(f.h.q[10].data(), f.kv(), 0.2f, 32, p, f.plan, o.data(), lse, split, so.data(), &slse);
  std::vector<KeyRange> below;
  for (KeyRange r : f.all)
    if (std::min(r.end, split) > r.begin) below.push_back({r.begin, std::min(r.end, split)});
  std::sort(below.begin(), below.end(), [](KeyRange a, KeyRange b) { return a.begin < b.begin; });
  attend_reference(f.h.q[10].data(), 1, f.kv(), below, 0.2f, ref.data(), &ref_lse);
  EXPECT_LT(test::max_abs_diff(so.data(), ref.data(), 32), 1e-5f);
}

TEST(Art, ProbeDisagreementIsCounted) {
  // d = 128: the probe sees every 4th element; with thresholds near the changes they can differ.
  DecodeHarness h(3000, 1, 1, 128);
  for (int i = 0; i < 2048; ++i) h.add_token();
  ArtPlan plan;
  art_blocks_recent({0, 2048}, 64, plan);
  ArtParams p;
  p.eps_scale = 0.05;
  p.eps_dir = 0.02;
  p.patience = 2;
  SeqKV kv{h.cache.layer(0), h.table.pages.data(), 0};
  ArtStats st;
  for (int t = 0; t < 20; ++t) {
    std::vector<float> o(128, 0.0f);
    float lse = kEmptyLse;
    st.add(art_traverse(h.q[size_t(2000 + t)].data(), kv, 1.0f / std::sqrt(128.0f), 128, p, plan, o.data(), lse));
  }
  std::map<std::string, double> c;
  st.add_counters(c);
  EXPECT_GE(c.at("art_probe_block_disagree"), 0.0);
  EXPECT_LE(c.at("art_probe_block_disagree"), 1.0);
  EXPECT_GT(c.at("art_visited_fraction"), 0.0);
  EXPECT_LE(c.at("art_visited_fraction"), 1.0);
}

// Every base with `+art:patience=<huge>` gives the base's output on random decode steps.
TEST(Art, PatienceBeyondBlocksEqualsBasePolicy) {
  const std::string huge = "patience=1000000";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dense", "art:order=recent," + huge},
      {"dense", "art:order=bound," + huge},
      {"dense", "art:order=group,round=4," + huge},
      {"quest:budget=96,dense_layers=0", "quest:budget=96,dense_layers=0+art:" + huge},
      {"gbsa:keep=0.2,n_min=2", "gbsa:keep=0.2,n_min=2+art:" + huge},
      {"streaming:sink=4,window=100", "streaming:sink=4,window=100+art:" + huge},
      {"mac:band=32,window=64,min_context=0", "mac:band=32,window=64,min_context=0+art:" + huge},
      {"quest:budget=96,dense_layers=0+mac:band=32,min_context=0", "quest:budget=96,dense_layers=0+mac:band=32,min_context=0+art:" + huge},
      // The GPU kernel's rule, over the plans it reads in visiting order (quest: the union, each
      // head its own pages of it).
      {"dense", "art:order=group,stop=group,test=probe,round=2," + huge},
      {"quest:budget=96,dense_layers=0", "quest:budget=96,dense_layers=0+art:stop=group,test=probe," + huge},
      {"gbsa:keep=0.2,n_min=2", "gbsa:keep=0.2,n_min=2+art:stop=group,test=probe,round=3," + huge},
      {"streaming:sink=4,window=100", "streaming:sink=4,window=100+art:stop=group,test=probe," + huge},
      // mac+art on the group rule: ART over MAC's part below the prefix end.
      {"mac:band=32,window=64,min_context=0", "mac:band=32,window=64,min_context=0+art:stop=group,round=2," + huge},
      {"quest:budget=96,dense_layers=0+mac:band=32,min_context=0",
       "quest:budget=96,dense_layers=0+mac:band=32,min_context=0+art:stop=group," + huge},
  };
  for (auto& [base_spec, art_spec] : cases) {
    auto base = make_policy(base_spec), art = make_policy(art_spec);
    DecodeHarness h(500, 2, 2, 32);
    h.prefill(*base, 300);
    {
      AttentionBatch b = h.batch(0, 300, false);
      art->attend(b);
    }
    for (int s = 0; s < 6; ++s) {
      h.add_token();
      if (s % 2 == 1) h.q_pre.back() = h.q_pre[size_t(280 + s)];  // MAC hits on odd steps
      AttentionBatch b = h.batch(h.table.length - 1, 1, true);
      base->attend(b);
      std::vector<float> want = h.out;
      b = h.batch(h.table.length - 1, 1, true);
      art->attend(b);
      EXPECT_LT(test::max_abs_diff(want.data(), h.out.data(), want.size()), 1e-5f) << art_spec << " step " << s;
    }
    auto c = art->counters();
    EXPECT_EQ(c.at("art_visited_fraction"), 1.0) << art_spec;
    EXPECT_EQ(c.at("art_early_stop_rate"), 0.0) << art_spec;
    EXPECT_EQ(base->stats().decode_keys_read, art->stats().decode_keys_read) << art_spec;
  }
}

TEST(Art, ParameterErrors) {
  EXPECT_THROW(make_policy("quest+art:order=bound"), Error);
  EXPECT_THROW(make_policy("art:order=oldest"), Error);
  EXPECT_THROW(make_policy("art:patience=0"), Error);
  EXPECT_THROW(make_policy("art:eps_dir=-1"), Error);
  EXPECT_NO_THROW(make_policy("art:order=bound"));
  EXPECT_NO_THROW(make_policy("art:order=group,round=8"));
  EXPECT_THROW(make_policy("art:round=0"), Error);
  EXPECT_NO_THROW(make_policy("dense+art"));
  EXPECT_NO_THROW(make_policy("cs+art"));
  EXPECT_NO_THROW(make_policy("resa+art:patience=4"));
  // The GPU rule needs one order per group; its lag goes with it.
  EXPECT_NO_THROW(make_policy("art:order=group,stop=group,test=probe,round=16,lag=2"));
  EXPECT_NO_THROW(make_policy("gbsa+art:stop=group"));
  EXPECT_THROW(make_policy("art:order=bound,stop=group"), Error);
  EXPECT_NO_THROW(make_policy("quest+art:stop=group"));  // quest's union by its pages' best bound
  EXPECT_NO_THROW(make_policy("streaming+art:stop=group"));
  EXPECT_THROW(make_policy("cs+art:stop=group"), Error);
  EXPECT_THROW(make_policy("art:order=bound,lag=2"), Error);  // stop defaults to head there
  EXPECT_NO_THROW(make_policy("art:lag=2"));
  EXPECT_NO_THROW(make_policy("art:order=group,stop=group+mac"));  // ART over MAC's below part
  EXPECT_THROW(make_policy("art:order=bound,stop=group+mac"), Error);
}

// mac+art on the group rule: ART's kernel over MAC's part below each row's prefix end (in the
// base's visiting order, a hit's band first), the rest read whole. With stops forced after the
// first tested round, a step without hits stops early and reads fewer keys than MAC alone; a
// step where every head hits has only its bands' pages below the prefix end (a round or less,
// never tested) and gives MAC's output.
TEST(Art, OverMacsBelowPartStopsThereAndReadsTheRestWhole) {
  for (const std::string base : {"mac:band=32,window=64,min_context=0", "gbsa:keep=0.5,n_min=2+mac:band=32,min_context=0"}) {
    auto mac = make_policy(base);
    auto art = make_policy(base + "+art:stop=group,round=1,patience=1,eps_scale=1000,eps_dir=2");
    DecodeHarness h(1200, 2, 2, 32);
    h.prefill(*mac, 1000);
    {
      AttentionBatch b = h.batch(0, 1000, false);
      art->attend(b);
    }
    for (int s = 0; s < 6; ++s) {
      h.add_token();
      const bool hits = s % 2 == 1;
      if (hits) h.q_pre.back() = h.q_pre[size_t(980 + s)];  // every head hits
      const uint64_t mac_keys = mac->stats().decode_keys_read, art_keys = art->stats().decode_keys_read;
      AttentionBatch b = h.batch(h.table.length - 1, 1, true);
      mac->attend(b);
      const std::vector<float> want = h.out;
      b = h.batch(h.table.length - 1, 1, true);
      art->attend(b);
      for (float x : h.out) ASSERT_TRUE(std::isfinite(x)) << base << " step " << s;
      if (hits) {
        EXPECT_LT(test::max_abs_diff(want.data(), h.out.data(), want.size()), 1e-5f) << base << " step " << s;
      } else {
        EXPECT_LT(art->stats().decode_keys_read - art_keys, (mac->stats().decode_keys_read - mac_keys) / 2)
            << base << " step " << s << ": a stop after the first tested round";
      }
    }
    auto c = art->counters();
    EXPECT_EQ(c.at("mac_hit_rate"), 0.5) << base;
    EXPECT_GE(c.at("art_early_stop_rate"), 0.5) << base;
  }
}

}  // namespace
}  // namespace skim
