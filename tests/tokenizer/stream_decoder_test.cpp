// StreamDecoder: never emits half a character; flush replaces what cannot be completed.
#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace skim {
namespace {

TEST(StreamDecoder, ConcatenationIsTheTextAndEveryPushIsValid) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  const std::string text = "emoji 👨‍👩‍👧‍👦 and 中文 with é, then code: def f(x):\n    return x\n";
  std::vector<int> ids = tok->encode(text);
  StreamDecoder stream(*tok);
  std::string streamed;
  size_t held_back = 0;
  for (int id : ids) {
    std::string piece = stream.push(id);
    EXPECT_TRUE(tok::utf8_valid(piece));
    if (tok::utf8_complete_prefix(tok->token_bytes(id)) != tok->token_bytes(id).size()) ++held_back;
    streamed += piece;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_GT(held_back, 0u) << "the sample should cut a character between tokens";
}

TEST(StreamDecoder, HoldsBackThenCompletesACharacter) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  // "é" is C3 A9: one byte token each in the byte-level alphabet.
  const int c3 = tok->token_id(tok::byte_level_char(0xC3));
  const int a9 = tok->token_id(tok::byte_level_char(0xA9));
  ASSERT_GE(c3, 0);
  ASSERT_GE(a9, 0);
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.push(c3), "");
  EXPECT_EQ(stream.push(a9), "é");
  EXPECT_EQ(stream.flush(), "");
}

TEST(StreamDecoder, FlushReplacesAnIncompleteTail) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  const int f0 = tok->token_id(tok::byte_level_char(0xF0));
  const int x9f = tok->token_id(tok::byte_level_char(0x9F));
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.push(tok->token_id("a")), "a");
  EXPECT_EQ(stream.push(f0), "");
  EXPECT_EQ(stream.push(x9f), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // one U+FFFD for the maximal invalid subpart
  EXPECT_EQ(stream.flush(), "");
}

TEST(StreamDecoder, ReplacesBytesThatCanNeverBeValidAtOnce) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  const int ff = tok->token_id(tok::byte_level_char(0xFF));
  const int c3 = tok->token_id(tok::byte_level_char(0xC3));
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.push(ff), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.push(c3), "");
  EXPECT_EQ(stream.push(tok->token_id("a")), "\xEF\xBF\xBD" "a");  // C3 then 'a' can never complete
}

TEST(StreamDecoder, ByteFallbackTokensOfAMetaspaceTokenizer) {
  auto tok = load_tokenizer(test::tokenizer_fixture("llama2-style.tokenizer.json"));
  StreamDecoder stream(*tok);
  // 中 = E4 B8 AD through byte fallback.
  EXPECT_EQ(stream.push(tok->token_id("<0xE4>")), "");
  EXPECT_EQ(stream.push(tok->token_id("<0xB8>")), "");
  EXPECT_EQ(stream.push(tok->token_id("<0xAD>")), "中");
  // Streaming keeps the space of "▁" even on the first token: it continues a prompt.
  const int word = tok->encode("hello")[0];
  EXPECT_EQ(tok->token_bytes(word).substr(0, 1), " ");
  EXPECT_EQ(stream.push(word), tok->token_bytes(word));
}

TEST(StreamDecoder, StreamsTheDecodeOfEveryFixtureSample) {
  for (const char* name : {"llama3-style", "qwen2-style", "mistral-style"}) {
    SCOPED_TRACE(name);
    auto tok = load_tokenizer(test::tokenizer_fixture(std::string(name) + ".tokenizer.json"));
    const std::string text = "Grüße 🍕 中文\n\tdef f(): return 1";
    std::vector<int> ids = tok->encode(text);
    StreamDecoder stream(*tok);
    std::string streamed;
    for (int id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    std::string joined;
    for (int id : ids) joined += tok->token_bytes(id);
    EXPECT_EQ(streamed, joined);
    EXPECT_NE(streamed.find("中文"), std::string::npos);
  }
}

}  // namespace
}  // namespace skim
