// The list flags of `skim eval` and their checks: every message names its flag.
#include "eval/eval_options.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "eval/corpus.h"

namespace skim::eval {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EvalOptions, ParsesLists) {
  EXPECT_EQ(parse_tasks("ppl,passkey"), (std::set<std::string>{"ppl", "passkey"}));
  EXPECT_EQ(parse_tasks("all").size(), known_tasks().size());
  EXPECT_EQ(parse_int_list("4096, 8192,16384", "--lengths"), (std::vector<int>{4096, 8192, 16384}));
  EXPECT_EQ(parse_double_list("0.1,0.5", "--depths"), (std::vector<double>{0.1, 0.5}));
}

TEST(EvalOptions, DenseComesFirstOnce) {
  EXPECT_EQ(parse_policies("quest,dense,resa"), (std::vector<std::string>{"dense", "quest", "resa"}));
  EXPECT_EQ(parse_policies("quest:budget=0.1,min=0"), (std::vector<std::string>{"dense", "quest:budget=0.1,min=0"}));
}

TEST(EvalOptions, BadInputNamesTheFlag) {
  EXPECT_NE(error_of([] { parse_tasks("ppl,nope"); }).find("--tasks: unknown task 'nope'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_int_list("4096,abc", "--lengths"); }).find("--lengths"), std::string::npos);
  EXPECT_NE(error_of([] { parse_int_list("4096,,8", "--lengths"); }).find("empty item"), std::string::npos);
  EXPECT_NE(error_of([] { parse_policies("dense,warp"); }).find("unknown policy 'warp'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_policies("quest,quest"); }).find("listed twice"), std::string::npos);

  EvalOptions o;
  o.ctx = 4096;
  o.lengths = {4096, 8192};
  EXPECT_NE(error_of([&] { validate(o); }).find("--lengths: 8192 is over --ctx 4096"), std::string::npos);
  o.lengths = {1024};
  o.decode_tokens = 4096;
  EXPECT_NE(error_of([&] { validate(o); }).find("--decode-tokens"), std::string::npos);
  o.decode_tokens = 64;
  o.buckets = 65;
  EXPECT_NE(error_of([&] { validate(o); }).find("--buckets"), std::string::npos);
  o.buckets = 4;
  o.depths = {1.5};
  EXPECT_NE(error_of([&] { validate(o); }).find("--depths"), std::string::npos);
  o.depths = {0.5};
  EXPECT_NO_THROW(validate(o));
  o.locality = true;
  o.tasks = {"passkey"};
  EXPECT_NE(error_of([&] { validate(o); }).find("--locality"), std::string::npos);
}

TEST(EvalOptions, MissingDataPathNamesTheFlag) {
  std::string e = error_of([] { load_corpus({"/nonexistent/skim-data"}, "--data"); });
  EXPECT_NE(e.find("--data"), std::string::npos) << e;
  EXPECT_NE(e.find("/nonexistent/skim-data"), std::string::npos) << e;
}

TEST(EvalOptions, FolderGivesItsFilesInOrderWithoutReadme) {
  Corpus c = load_corpus({std::filesystem::path(SKIM_SOURCE_DIR) / "data/heldout-python"});
  ASSERT_GE(c.documents.size(), 2u);
  for (const Document& d : c.documents) EXPECT_EQ(d.name.find("README"), std::string::npos);
  EXPECT_LT(c.documents[0].name, c.documents[1].name);
}

}  // namespace
}  // namespace skim::eval
