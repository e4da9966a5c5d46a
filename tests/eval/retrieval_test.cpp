// Passkey prompts: definition lines at line boundaries at the asked depth, the prompt ending
// exactly with "\nassert SECRET_X ==", the same prompt for the same seed.
#include "eval/retrieval.h"

#include <gtest/gtest.h>

#include <set>

#include "tokenizer/tokenizer.h"

namespace skim::eval {
namespace {

const std::filesystem::path kDemo = std::filesystem::path(SKIM_SOURCE_DIR) / "models/demo-code-28m";

// 1000 numbered lines, 3 "tokens" each under the counter below.
Corpus numbered_corpus() {
  Corpus c;
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "x = " + std::to_string(1000000 + i) + "\n";  // 12 bytes
  c.documents.push_back({"numbers", text});
  return c;
}
size_t four_bytes_a_token(std::string_view s) { return (s.size() + 3) / 4; }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Haystack lines (not definitions) before byte `offset`.
int haystack_lines_before(const PasskeyPrompt& p, size_t offset) {
  int n = 0;
  for (size_t b = 0; b < offset;) {
    size_t e = p.text.find('\n', b);
    if (p.text.compare(b, 7, "SECRET_") != 0) ++n;
    b = e + 1;
  }
  return n;
}

TEST(Passkey, OneKeyAtTheAskedDepth) {
  Corpus c = numbered_corpus();
  for (double depth : {0.0, 0.25, 0.5, 0.9, 1.0}) {
    PasskeyPrompt p = build_passkey_prompt(c, {1, depth, 7}, 300, four_bytes_a_token);  // 100 lines
    ASSERT_EQ(p.needles.size(), 1u);
    const Needle& n = p.needles[0];
    EXPECT_EQ(n.name.rfind("SECRET_", 0), 0u);
    EXPECT_EQ(n.value.size(), 5u);
    // A whole line at a line boundary.
    EXPECT_TRUE(n.offset == 0 || p.text[n.offset - 1] == '\n');
    EXPECT_EQ(p.text.compare(n.offset, n.name.size() + n.value.size() + 4, n.name + " = " + n.value + "\n"), 0);
    EXPECT_NEAR(haystack_lines_before(p, n.offset), depth * 100, 0.51) << depth;
    EXPECT_NEAR(n.depth, depth, 0.006);
    EXPECT_EQ(p.question, "\nassert " + n.name + " ==");
    EXPECT_TRUE(ends_with(p.text, "\nassert " + n.name + " ==")) << p.text.substr(p.text.size() - 40);
    EXPECT_EQ(p.answer, " " + n.value);
    EXPECT_EQ(p.text.find(n.name + " = "), n.offset);  // defined once
  }
}

TEST(Passkey, FourKeysDistinctWithTheAskedOneWhereAsked) {
  Corpus c = numbered_corpus();
  PasskeyPrompt p = build_passkey_prompt(c, {4, 0.7, 11}, 600, four_bytes_a_token);  // 200 lines
  ASSERT_EQ(p.needles.size(), 4u);
  std::set<std::string> names;
  for (size_t i = 0; i < 4; ++i) {
    names.insert(p.needles[i].name);
    if (i) {
      EXPECT_LE(p.needles[i - 1].offset, p.needles[i].offset);  // text order
    }
    EXPECT_TRUE(p.text[p.needles[i].offset - 1] == '\n');
  }
  EXPECT_EQ(names.size(), 4u);
  const Needle& asked = p.needles[p.asked];
  EXPECT_NEAR(haystack_lines_before(p, asked.offset), 140, 0.51);
  EXPECT_TRUE(ends_with(p.text, "\nassert " + asked.name + " =="));
  EXPECT_EQ(p.answer, " " + asked.value);
}

TEST(Passkey, SameSeedSamePromptOtherSeedOther) {
  Corpus c = numbered_corpus();
  PasskeyPrompt a = build_passkey_prompt(c, {4, 0.5, 3}, 300, four_bytes_a_token);
  PasskeyPrompt b = build_passkey_prompt(c, {4, 0.5, 3}, 300, four_bytes_a_token);
  PasskeyPrompt d = build_passkey_prompt(c, {4, 0.5, 4}, 300, four_bytes_a_token);
  EXPECT_EQ(a.text, b.text);
  EXPECT_NE(a.text, d.text);
}

TEST(Passkey, AnswerMatchesAPrefix) {
  EXPECT_TRUE(answer_matches(" 48213\n", " 48213"));
  EXPECT_TRUE(answer_matches(" 48213", " 48213"));
  EXPECT_FALSE(answer_matches(" 4821", " 48213"));
  EXPECT_FALSE(answer_matches("48213", " 48213"));
  EXPECT_FALSE(answer_matches(" 48212", " 48213"));
}

TEST(Passkey, TokenizedPromptFitsAndTheQuestionIsTheSuffix) {
  auto tok = load_tokenizer(kDemo / "tokenizer.json");
  Corpus c = load_corpus({std::filesystem::path(SKIM_SOURCE_DIR) / "data/heldout-python"});
  for (size_t length : {256u, 1000u}) {
    TokenizedPasskey t = tokenize_passkey(c, {4, 0.3, 5}, length, *tok);
    EXPECT_LE(t.ids.size(), length);
    EXPECT_GE(t.ids.size(), length - 40);
    EXPECT_EQ(tok->decode(t.ids), tok->decode(tok->encode_prompt("")) + t.prompt.text);
    std::vector<int> question(t.ids.begin() + long(t.question_start), t.ids.end());
    std::string q = tok->decode(question);
    EXPECT_TRUE(ends_with(q, t.prompt.question.substr(1))) << q;
    EXPECT_GE(q.size(), t.prompt.question.size());
    EXPECT_GT(t.question_start, 0u);
  }
}

}  // namespace
}  // namespace skim::eval
