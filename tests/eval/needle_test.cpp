// Needle prompts (eval/needle.h): the needle at the asked depth of the haystack, inside one
// user turn of the chat template, the whole prompt within the length, the decoded suffix
// covering the question and the template's tail; answers scored as whole numbers, words or
// exact strings.
#include "eval/needle.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace skim::eval {
namespace {

const std::filesystem::path kDemo = std::filesystem::path(SKIM_SOURCE_DIR) / "models/demo-code-28m";

Corpus numbered_corpus() {
  Corpus c;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "x = " + std::to_string(1000000 + i) + "\n";
  c.documents.push_back({"numbers", text});
  return c;
}

// A ChatML-like template, as a chat template renders one user message.
std::string chatml(const std::string& user) {
  return "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n" + user +
         "<|im_end|>\n<|im_start|>assistant\n";
}

TEST(Needle, SitsAtItsDepthInsideTheUserTurnAndFitsTheLength) {
  const auto tok = load_tokenizer(kDemo / "tokenizer.json");
  const Corpus corpus = numbered_corpus();
  for (const std::string& kind : needle_kinds())
    for (double depth : {0.0, 0.5, 1.0}) {
      NeedleCase c{kind, depth, 7};
      TokenizedNeedle t = tokenize_needle(corpus, c, 600, *tok, chatml);
      const std::string& text = t.prompt.text;
      EXPECT_LE(t.ids.size(), 600u);
      EXPECT_GE(t.ids.size(), 560u) << "the haystack fills the length";
      EXPECT_EQ(text.rfind("<|im_start|>user\n", 0), std::string::npos);  // the system turn first
      const size_t user = text.find("<|im_start|>user\n"), needle = text.find(t.prompt.value);
      ASSERT_NE(needle, std::string::npos) << kind;
      EXPECT_GT(needle, user);
      EXPECT_NEAR(t.prompt.depth, depth, 0.02) << kind;
      // The decoded part covers the question and the assistant header, and not the needle.
      std::string tail;
      for (size_t i = t.question_start; i < t.ids.size(); ++i) tail += tok->token_bytes(t.ids[i]);
      EXPECT_NE(tail.find(t.prompt.question), std::string::npos);
      EXPECT_NE(tail.find("<|im_start|>assistant\n"), std::string::npos);
      EXPECT_LT(tail.size(), t.prompt.question.size() + 80);
      EXPECT_EQ(tok->decode(t.ids), text);  // nothing added: the template writes any BOS itself
      // The needle's token span spells its line, with at most a token of context either side.
      std::string span;
      for (size_t i = t.needle_begin; i < t.needle_end; ++i) span += tok->token_bytes(t.ids[i]);
      EXPECT_NE(span.find(t.prompt.value), std::string::npos) << kind;
      EXPECT_LT(span.size(), t.prompt.needle_bytes + 40) << kind;
    }
  // Deterministic for a seed; another seed moves the value.
  EXPECT_EQ(tokenize_needle(corpus, {"number", 0.5, 7}, 600, *tok, chatml).ids,
            tokenize_needle(corpus, {"number", 0.5, 7}, 600, *tok, chatml).ids);
  EXPECT_NE(tokenize_needle(corpus, {"number", 0.5, 7}, 600, *tok, chatml).prompt.value,
            tokenize_needle(corpus, {"number", 0.5, 8}, 600, *tok, chatml).prompt.value);
  EXPECT_THROW(tokenize_needle(corpus, {"colour", 0.5, 7}, 600, *tok, chatml), Error);
}

TEST(Needle, AnswersAreScoredByKind) {
  EXPECT_TRUE(needle_found("The pass key is 48213.", "number", "48213"));
  EXPECT_TRUE(needle_found("48213", "number", "48213"));
  EXPECT_FALSE(needle_found("The pass key is 482130.", "number", "48213"));
  EXPECT_FALSE(needle_found("The secret pass key is 2.", "number", "48213"));
  EXPECT_TRUE(needle_found("Juniper", "word", "juniper"));
  EXPECT_FALSE(needle_found("junipers", "word", "juniper"));
  EXPECT_TRUE(needle_found("\"QX-7142\"", "code", "QX-7142"));
  EXPECT_FALSE(needle_found("QX-714", "code", "QX-7142"));
}

}  // namespace
}  // namespace skim::eval
