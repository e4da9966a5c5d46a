// split_policy_list: policy strings hold commas themselves, so a bare key=value continues the
// policy before it.
#include <gtest/gtest.h>

#include "attention/policy_spec.h"
#include "core/error.h"

namespace skim {
namespace {

using List = std::vector<std::string>;

TEST(PolicyList, SplitsOnItemsWithoutKeyValue) {
  EXPECT_EQ(split_policy_list("dense,quest,resa"), (List{"dense", "quest", "resa"}));
  EXPECT_EQ(split_policy_list("quest:budget=0.1,dense_layers=1,resa:keep=0.1,f=32,dense"),
            (List{"quest:budget=0.1,dense_layers=1", "resa:keep=0.1,f=32", "dense"}));
  EXPECT_EQ(split_policy_list("dense,quest:budget=0.1"), (List{"dense", "quest:budget=0.1"}));
  EXPECT_EQ(split_policy_list("streaming:sink=4,window=1634"), (List{"streaming:sink=4,window=1634"}));
}

TEST(PolicyList, KeepsCompositions) {
  EXPECT_EQ(split_policy_list("gbsa:keep=0.1+rectify:f=32,quest+rectify"),
            (List{"gbsa:keep=0.1+rectify:f=32", "quest+rectify"}));
  EXPECT_EQ(split_policy_list("quest:budget=0.1,dense_layers=1+rectify:f=8,dense"),
            (List{"quest:budget=0.1,dense_layers=1+rectify:f=8", "dense"}));
  EXPECT_EQ(split_policy_list(" dense , quest "), (List{"dense", "quest"}));
}

TEST(PolicyList, RejectsEmptyItemsAndOrphanParameters) {
  EXPECT_THROW(split_policy_list(""), Error);
  EXPECT_THROW(split_policy_list("dense,,quest"), Error);
  EXPECT_THROW(split_policy_list("dense,"), Error);
  try {
    split_policy_list("budget=0.1,quest");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--policy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("budget=0.1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace skim
