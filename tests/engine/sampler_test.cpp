#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/utf8.h"

namespace skim {
namespace {

TEST(Sampler, TemperatureZeroIsArgmax) {
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 2.9f};
  Sampler s(SamplingParams{});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[size_t(i)] = float(i % 7) * 0.3f;
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits), b.sample(logits));
}

TEST(Sampler, TopKAndTopPRestrictTheCandidates) {
  std::vector<float> logits = {5.0f, 4.9f, 0.0f, -1.0f, 4.8f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    int t = s.sample(logits);
    EXPECT_TRUE(t == 0 || t == 1);
  }
  p.top_k = 0;
  p.top_p = 0.5f;  // the first two tokens hold more than half the mass
  Sampler n(p);
  std::map<int, int> seen;
  for (int i = 0; i < 400; ++i) seen[n.sample(logits)]++;
  for (auto [t, c] : seen) EXPECT_TRUE(t == 0 || t == 1) << t;
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(p);
  int ones = 0, n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(logits);
  EXPECT_NEAR(double(ones) / n, 0.75, 0.02);
}

TEST(Utf8, CompletePrefixHoldsBackACutCharacter) {
  std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(utf8_complete_prefix("ab" + euro), 5u);
  EXPECT_EQ(utf8_complete_prefix("ab" + euro.substr(0, 2)), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);  // invalid counts as complete
  EXPECT_EQ(utf8_sanitize("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8_sanitize(euro.substr(0, 2)), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

}  // namespace
}  // namespace skim
