#include "attention/policy_spec.h"

#include <gtest/gtest.h>

#include "attention/policy.h"
#include "core/error.h"

namespace skim {
namespace {

std::string error_of(const std::string& spec) {
  try {
    make_policy(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PolicySpec, ParsesPartsAndParameters) {
  PolicySpec s = parse_policy_spec("quest:budget=0.1,dense_layers=1+rectify:f=16");
  ASSERT_EQ(s.parts.size(), 2u);
  EXPECT_EQ(s.parts[0].name, "quest");
  EXPECT_DOUBLE_EQ(s.parts[0].number("budget", 0), 0.1);
  EXPECT_EQ(s.parts[0].integer("dense_layers", 0), 1);
  EXPECT_EQ(s.parts[1].integer("f", 0), 16);
  EXPECT_EQ(s.canonical(), "quest:budget=0.1,dense_layers=1+rectify:f=16");
}

TEST(PolicySpec, BuildsEveryKnownPolicy) {
  for (const char* spec : {"dense", "streaming", "streaming:sink=4,window=1024", "quest",
                           "quest:budget=0.1", "quest:budget=2048,min=0", "gbsa", "resa",
                           "resa:keep=0.1,f=32", "gbsa:keep=0.1+rectify:f=32", "quest+rectify"}) {
    EXPECT_NO_THROW(make_policy(spec)) << spec;
  }
  EXPECT_EQ(make_policy("resa")->corrections().rectify_every, 32);
  EXPECT_EQ(make_policy("gbsa+rectify:f=8")->corrections().rectify_every, 8);
  EXPECT_EQ(make_policy("gbsa")->corrections().rectify_every, 0);
}

// Which policies hold per-sequence state beyond the cache (the server's prefix cache may only
// copy sequences for the others).
TEST(PolicySpec, PoliciesSayWhetherTheyKeepSequenceState) {
  for (const char* spec : {"dense", "streaming", "quest", "gbsa", "resa", "gbsa+rectify:f=8", "quest+art", "art"})
    EXPECT_FALSE(make_policy(spec)->keeps_sequence_state()) << spec;
  for (const char* spec : {"mac", "cs", "quest+retro", "quest+mac", "cs+art"})
    EXPECT_TRUE(make_policy(spec)->keeps_sequence_state()) << spec;
}

TEST(PolicySpec, BadStringsNameTheirFault) {
  EXPECT_NE(error_of("").find("empty policy"), std::string::npos);
  EXPECT_NE(error_of("qest").find("unknown policy 'qest'"), std::string::npos);
  EXPECT_NE(error_of("quest:budgett=0.1").find("no parameter 'budgett'"), std::string::npos);
  EXPECT_NE(error_of("quest:budget").find("not key=value"), std::string::npos);
  EXPECT_NE(error_of("quest:budget=abc").find("is not a finite number"), std::string::npos);
  EXPECT_NE(error_of("quest:budget=inf").find("is not a finite number"), std::string::npos);
  EXPECT_NE(error_of("quest:budget=nan").find("is not a finite number"), std::string::npos);
  EXPECT_NE(error_of("resa:f=0").find("must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("gbsa+rectify:f=0").find("must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("quest:budget=-1").find("must be > 0"), std::string::npos);
  EXPECT_NE(error_of("gbsa:keep=1.5").find("(0, 1]"), std::string::npos);
  EXPECT_NE(error_of("quest+gbsa").find("both choose the keys"), std::string::npos);
  EXPECT_NE(error_of("dense+rectify").find("nothing to rectify"), std::string::npos);
  EXPECT_NE(error_of("rectify").find("nothing to rectify"), std::string::npos);
  EXPECT_NE(error_of("quest+quest").find("appears twice"), std::string::npos);
  EXPECT_NE(error_of("quest+").find("empty part"), std::string::npos);
  EXPECT_NE(error_of("gbsa+rectify:f=0").find("must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("streaming:window=0").find("out of range"), std::string::npos);
}

}  // namespace
}  // namespace skim
