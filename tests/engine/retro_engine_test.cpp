// RetroAttention in the engine: w = 1 is the base policy; with a full budget nothing is unseen
// and Retro equals dense; with a sparse budget it runs w-1 extra rows and grows the budget;
// its state follows a fork; combinations without a page selector are refused.
#include <gtest/gtest.h>

#include <cmath>

#include "tiny_engine.h"
#include "attention/policy.h"
#include "core/error.h"
#include "skim/engine.h"

namespace skim {
namespace {


using test::random_ids;
const auto& max_diff = test::max_abs_diff;

std::unique_ptr<Engine> make_engine(const std::string& policy, int ctx) { return test::make_tiny_engine(policy, ctx, 2); }

// Prefill `prompt`, teacher-force `feed`; logits per step.
std::vector<std::vector<float>> run(Engine& e, const std::vector<int>& prompt, const std::vector<int>& feed) {
  int seq = e.open_sequence();
  e.append(seq, prompt, {});
  return test::decode_each(e, seq, feed);
}



TEST(RetroEngine, WindowOneEqualsBase) {
  auto prompt = random_ids(400), feed = random_ids(20);
  for (const char* base : {"quest:budget=64,min=0", "gbsa:keep=0.1,n_min=2"}) {
    auto ref = run(*make_engine(base, 512), prompt, feed);
    auto got = run(*make_engine(std::string(base) + "+retro:w=1", 512), prompt, feed);
    for (size_t i = 0; i < feed.size(); ++i) EXPECT_EQ(max_diff(ref[i], got[i]), 0.0f) << base << " step " << i;
  }
}

TEST(RetroEngine, FullBudgetEqualsDense) {
  auto prompt = random_ids(300), feed = random_ids(16);
  auto dense = run(*make_engine("dense", 512), prompt, feed);
  for (const char* spec : {"quest:budget=1.0,dense_layers=0+retro:w=4", "quest:budget=100000+retro:w=2",
                           "gbsa:keep=1+retro:w=8"}) {
    auto e = make_engine(spec, 512);
    auto got = run(*e, prompt, feed);
    for (size_t i = 0; i < feed.size(); ++i) EXPECT_LT(max_diff(dense[i], got[i]), 1e-4f) << spec << " step " << i;
    auto c = e->policy().counters();
    if (c.count("retro_budget_growth")) {
      EXPECT_NEAR(c["retro_budget_growth"], 1.0, 1e-12) << spec;  // nothing unseen
    }
  }
}

TEST(RetroEngine, SparseBudgetSupplementsPastQueries) {
  auto prompt = random_ids(480), feed = random_ids(24);
  const std::string base = "quest:budget=48,min=0,dense_layers=0";
  auto quest = run(*make_engine(base, 600), prompt, feed);
  auto e = make_engine(base + "+retro:w=4", 600);
  auto retro = run(*e, prompt, feed);
  // Step 0 has no past rows: quest's output, up to fp32 rounding (quest's plan reads each key
  // once for the heads of its group that attend it; retro's rows attend head by head).
  EXPECT_LT(max_diff(quest[0], retro[0]), 1e-5f);
  float later = 0;
  for (size_t i = 1; i < feed.size(); ++i) later = std::max(later, max_diff(quest[i], retro[i]));
  EXPECT_GT(later, 0.0f);  // past rows were updated, so later steps differ
  auto c = e->policy().counters();
  EXPECT_GT(c["retro_budget_growth"], 1.0);
  // Steps 0, 1, 2 have 0, 1, 2 past rows, then 3 each.
  EXPECT_NEAR(c["retro_extra_rows_per_step"], (0 + 1 + 2 + 3.0 * (feed.size() - 3)) / feed.size(), 1e-9);
}

TEST(RetroEngine, StateFollowsFork) {
  auto prompt = random_ids(300), feed = random_ids(12);
  auto e = make_engine("quest:budget=32,min=0,dense_layers=0+retro:w=3", 512);
  int seq = e->open_sequence();
  e->append(seq, prompt, {});
  for (int i = 0; i < 4; ++i) e->decode(std::span<const int>(&seq, 1), std::span<const int>(&feed[size_t(i)], 1));
  int copy = e->fork_sequence(seq);
  for (size_t i = 4; i < feed.size(); ++i) {
    auto a = e->decode(std::span<const int>(&seq, 1), std::span<const int>(&feed[i], 1));
    auto b = e->decode(std::span<const int>(&copy, 1), std::span<const int>(&feed[i], 1));
    EXPECT_EQ(max_diff(a, b), 0.0f) << "step " << i;
  }
}

TEST(RetroEngine, TwoSequencesInOneStep) {
  auto p1 = random_ids(200), p2 = random_ids(260), feed = random_ids(8);
  const std::string spec = "quest:budget=32,min=0,dense_layers=0+retro:w=3";
  auto solo1 = run(*make_engine(spec, 400), p1, feed);
  auto solo2 = run(*make_engine(spec, 400), p2, feed);
  auto e = make_engine(spec, 400);
  int a = e->open_sequence(), b = e->open_sequence();
  e->append(a, p1, {});
  e->append(b, p2, {});
  const int vocab = int(solo1[0].size());
  for (size_t i = 0; i < feed.size(); ++i) {
    int seqs[2] = {a, b}, toks[2] = {feed[i], feed[i]};
    auto l = e->decode(seqs, toks);
    std::vector<float> l1(l.begin(), l.begin() + vocab), l2(l.begin() + vocab, l.end());
    EXPECT_LT(max_diff(l1, solo1[i]), 1e-4f);
    EXPECT_LT(max_diff(l2, solo2[i]), 1e-4f);
  }
}

TEST(RetroEngine, RefusesCombinationsWithoutPageSelector) {
  for (const char* bad : {"retro", "dense+retro", "streaming+retro", "cs+retro", "quest+retro:w=0",
                          "quest+retro:w=100", "quest+retro:x=1"}) {
    try {
      make_policy(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("retro"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(make_policy("resa+retro:w=4"));
  EXPECT_EQ(make_policy("quest+retro:w=4")->corrections().retro_window, 4);
}

}  // namespace
}  // namespace skim
