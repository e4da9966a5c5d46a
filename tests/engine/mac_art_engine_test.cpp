// MAC and ART inside the engine (tiny checkpoint: 2 layers, so quest's default dense_layers=2
// would leave ART nothing to do; random ids): compositions parse and run,
// the limits that make them exact hold, and a forked sequence keeps its MAC rings.
#include <gtest/gtest.h>

#include <cmath>

#include "tiny_engine.h"
#include "attention/policy.h"
#include "skim/engine.h"

namespace skim {
namespace {



using test::random_ids;
const auto& feed = test::decode_each;

std::unique_ptr<Engine> make_engine(const std::string& policy, int context) { return test::make_tiny_engine(policy, context); }

std::vector<std::vector<float>> run(const std::string& policy, const std::vector<int>& prompt, const std::vector<int>& tokens,
                                    std::map<std::string, double>* counters = nullptr) {
  auto e = make_engine(policy, int(prompt.size() + tokens.size()) + 8);
  int seq = e->open_sequence();
  e->append(seq, prompt, {});
  auto l = feed(*e, seq, tokens);
  if (counters) *counters = e->policy().counters();
  return l;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(MacArtEngine, CompositionsRun) {
  auto prompt = random_ids(300), tokens = random_ids(6);
  // MAC at a context this short only with min_context lowered (its default waits for 2048 keys).
  for (const char* spec : {"quest:dense_layers=0+art", "resa+art", "mac:min_context=0+art", "mac:min_context=0",
                           "quest+mac:min_context=0", "quest:dense_layers=1+mac:min_context=0+art", "streaming+art",
                           "art:order=bound", "dense+art:order=recent", "cs+art", "gbsa+mac:tau=0.75,min_context=0"}) {
    std::map<std::string, double> c;
    auto l = run(spec, prompt, tokens, &c);
    SCOPED_TRACE(spec);
    ASSERT_EQ(l.size(), tokens.size()) << spec;
    for (float x : l.back()) ASSERT_TRUE(std::isfinite(x)) << spec;
    const std::string s = spec;
    if (s.find("art") != std::string::npos) {
      EXPECT_GT(c.at("art_visited_fraction"), 0.0) << spec;
      EXPECT_LE(c.at("art_visited_fraction"), 1.0) << spec;
    }
    if (s.find("mac") != std::string::npos) {
      EXPECT_TRUE(c.count("mac_hit_rate")) << spec;
    }
  }
}

TEST(MacArtEngine, ExactLimits) {
  // Layer 0's pre-RoPE query depends on the token alone: a repeated token is an exact match
  // whatever tau. Fed tokens unseen in the prompt and distinct keep every layer missing.
  auto prompt = random_ids(300, 0, 399), tokens = std::vector<int>{400, 410, 420, 430, 440, 450, 460, 470};
  auto dense = run("dense", prompt, tokens), quest = run("quest:budget=64,dense_layers=1", prompt, tokens);
  auto mac_miss = run("mac:tau=0.99,min_context=0", prompt, tokens);
  auto quest_art = run("quest:budget=64,dense_layers=1+art:patience=1000000", prompt, tokens);
  auto dense_art = run("art:order=bound,patience=1000000", prompt, tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_LT(max_diff(mac_miss[i], dense[i]), 1e-4f) << "step " << i;
    EXPECT_LT(max_diff(quest_art[i], quest[i]), 1e-4f) << "step " << i;
    EXPECT_LT(max_diff(dense_art[i], dense[i]), 1e-4f) << "step " << i;
  }
}

// The eval forks after prefill: the fork must decode exactly as the original would.
TEST(MacArtEngine, ForkKeepsRings) {
  auto prompt = random_ids(200), tokens = random_ids(6);
  const std::string spec = "mac:tau=0,window=64,band=16,min_context=0";  // tau 0: hits whenever nearer than sqrt(2d)
  std::map<std::string, double> c;
  auto direct = run(spec, prompt, tokens, &c);
  auto e = make_engine(spec, 1000);
  int seq = e->open_sequence();
  e->append(seq, prompt, {});
  int fork = e->fork_sequence(seq);
  auto forked = feed(*e, fork, tokens);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(max_diff(direct[i], forked[i]), 0.0f) << "step " << i;
  std::printf("tiny model, mac tau=0: hit rate %.3f\n", c.at("mac_hit_rate"));

  // The eval's way: prefill under dense, switch to mac (set_policy re-runs the last K tokens
  // so the rings fill), fork, decode.
  auto e2 = make_engine("dense", 1000);
  int base = e2->open_sequence();
  e2->append(base, prompt, {});
  e2->set_policy(spec);
  auto switched = feed(*e2, e2->fork_sequence(base), tokens);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_LT(max_diff(direct[i], switched[i]), 1e-4f) << "step " << i;
}

}  // namespace
}  // namespace skim
