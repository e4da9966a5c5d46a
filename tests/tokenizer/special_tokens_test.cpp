// Added and special tokens: matching, allow_special, BOS from the post-processor, lookups.
#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "tokenizer/tokenizer.h"

namespace skim {
namespace {

TEST(SpecialTokens, DemoEndOfTextIsOneTokenOnlyWhenAllowed) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  const int eot = tok->token_id("<|endoftext|>");
  ASSERT_EQ(eot, 0);
  EXPECT_TRUE(tok->is_special(eot));
  EXPECT_TRUE(tok->is_special(tok->token_id("<|pad|>")));
  EXPECT_FALSE(tok->is_special(tok->token_id("def")));
  EXPECT_FALSE(tok->is_special(-1));
  EXPECT_FALSE(tok->is_special(1 << 20));

  std::vector<int> with = tok->encode("a<|endoftext|>b", true);
  std::vector<int> without = tok->encode("a<|endoftext|>b", false);
  EXPECT_EQ(std::count(with.begin(), with.end(), eot), 1);
  EXPECT_EQ(std::count(without.begin(), without.end(), eot), 0);
  EXPECT_EQ(tok->decode(with), "a<|endoftext|>b");
  EXPECT_EQ(tok->decode(without), "a<|endoftext|>b");
  EXPECT_EQ(tok->token_bytes(eot), "<|endoftext|>");
}

TEST(SpecialTokens, DemoHasNoBos) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  EXPECT_EQ(tok->encode_prompt("x = 1"), tok->encode("x = 1"));
  EXPECT_EQ(tok->vocab_size(), 8192);
}

TEST(SpecialTokens, Llama3AndLlama2AddBos) {
  auto llama3 = load_tokenizer(test::tokenizer_fixture("llama3-style.tokenizer.json"));
  const int bos = llama3->token_id("<|begin_of_text|>");
  std::vector<int> ids = llama3->encode_prompt("hi");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), bos);
  EXPECT_EQ(std::vector<int>(ids.begin() + 1, ids.end()), llama3->encode("hi"));

  auto llama2 = load_tokenizer(test::tokenizer_fixture("llama2-style.tokenizer.json"));
  EXPECT_EQ(llama2->encode_prompt("hi").front(), llama2->token_id("<s>"));
  // The Metaspace decoder drops the space it prepended; token_bytes keeps it.
  EXPECT_EQ(llama2->decode(llama2->encode("hi there")), "hi there");
}

TEST(SpecialTokens, NonSpecialAddedTokenIsMatchedEvenWithoutAllowSpecial) {
  auto tok = load_tokenizer(test::tokenizer_fixture("llama3-style.tokenizer.json"));
  const int tool = tok->token_id("<tool>");
  ASSERT_GE(tool, 0);
  EXPECT_FALSE(tok->is_special(tool));
  std::vector<int> ids = tok->encode("x <tool>", false);
  EXPECT_EQ(ids.back(), tool);
  // lstrip: the space before it belongs to the token.
  EXPECT_EQ(tok->encode("x <tool>", false), tok->encode("x<tool>", false));
}

TEST(SpecialTokens, SingleWordTokenOnlyStandsAlone) {
  auto tok = load_tokenizer(test::tokenizer_fixture("qwen2-style.tokenizer.json"));
  const int tool = tok->token_id("<tool>");
  auto count = [&](const std::string& text) {
    std::vector<int> ids = tok->encode(text);
    return std::count(ids.begin(), ids.end(), tool);
  };
  EXPECT_EQ(count("<tool> a"), 1);
  EXPECT_EQ(count("a <tool>"), 1);
  EXPECT_EQ(count("a<tool>"), 0);
  EXPECT_EQ(count("<tool>b"), 0);
}

TEST(SpecialTokens, LongestMatchWins) {
  auto tok = load_tokenizer(test::tokenizer_fixture("llama3-style.tokenizer.json"));
  std::vector<int> ids = tok->encode("<|reserved_special_token_0|><|end_of_text|>");
  EXPECT_EQ(ids, (std::vector<int>{tok->token_id("<|reserved_special_token_0|>"), tok->token_id("<|end_of_text|>")}));
}

TEST(SpecialTokens, UnknownIdsDecodeToNothing) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  EXPECT_EQ(tok->decode({-5, 1 << 20}), "");
  EXPECT_EQ(tok->token_bytes(-1), "");
  EXPECT_EQ(tok->token_id("no such token"), -1);
}

}  // namespace
}  // namespace skim
