// The building blocks: UTF-8 repair as Python does it, split behaviors, normalizers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/split.h"
#include "tokenizer/unicode_normalize.h"
#include "tokenizer/utf8.h"

namespace skim::tok {
namespace {

constexpr const char* kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ReplacesMaximalSubpartsLikePython) {
  EXPECT_EQ(utf8_replace_invalid("abc"), "abc");
  EXPECT_EQ(utf8_replace_invalid("a\x80" "b"), std::string("a") + kFffd + "b");
  EXPECT_EQ(utf8_replace_invalid("\xC0\xAF"), std::string(kFffd) + kFffd);           // overlong
  EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), std::string(kFffd) + kFffd + kFffd);  // surrogate
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\x98"), kFffd);                            // truncated emoji
  EXPECT_EQ(utf8_replace_invalid("\xE4\xB8 x"), std::string(kFffd) + " x");
  EXPECT_EQ(utf8_replace_invalid("\xF4\x90\x80\x80"), std::string(kFffd) + kFffd + kFffd + kFffd);
}

TEST(Utf8, CompletePrefixHoldsOnlyAPossibleCharacter) {
  EXPECT_EQ(utf8_complete_prefix("ab\xE4\xB8"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE4\xB8\xAD"), 5u);
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);  // can never be completed: not held
  EXPECT_EQ(utf8_complete_prefix("\xF0"), 0u);
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
}

TEST(Split, Behaviors) {
  // "a-b--c" with matches on each '-'.
  const std::vector<Span> matches{{1, 2}, {3, 4}, {4, 5}};
  auto pieces = [&](SplitBehavior b, bool invert = false) { return split_pieces(6, matches, b, invert); };
  EXPECT_EQ(pieces(SplitBehavior::kIsolated), (std::vector<Span>{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}}));
  EXPECT_EQ(pieces(SplitBehavior::kRemoved), (std::vector<Span>{{0, 1}, {2, 3}, {5, 6}}));
  EXPECT_EQ(pieces(SplitBehavior::kMergedWithPrevious), (std::vector<Span>{{0, 2}, {2, 4}, {4, 5}, {5, 6}}));
  EXPECT_EQ(pieces(SplitBehavior::kMergedWithNext), (std::vector<Span>{{0, 1}, {1, 3}, {3, 4}, {4, 6}}));
  EXPECT_EQ(pieces(SplitBehavior::kContiguous), (std::vector<Span>{{0, 1}, {1, 2}, {2, 3}, {3, 5}, {5, 6}}));
  EXPECT_EQ(pieces(SplitBehavior::kRemoved, true), (std::vector<Span>{{1, 2}, {3, 4}, {4, 5}}));
}

TEST(UnicodeNormalize, NfcComposesAndKeepsAscii) {
  EXPECT_EQ(unicode_normalize("cafe\xCC\x81", NormalForm::kNFC), "caf\xC3\xA9");
  EXPECT_EQ(unicode_normalize("caf\xC3\xA9", NormalForm::kNFD), "cafe\xCC\x81");
  EXPECT_EQ(unicode_normalize("\xEF\xAC\x81", NormalForm::kNFKC), "fi");  // ligature
  EXPECT_EQ(unicode_normalize("plain ascii", NormalForm::kNFC), "plain ascii");
  EXPECT_EQ(unicode_lowercase("ÀB C"), "àb c");
}

TEST(Regex, OnigurumaWhitespaceIncludesNel) {
  EXPECT_EQ(oniguruma_compatible(R"(\s+(?!\S)|[^\s\p{L}])"), R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}])");
  Regex spaces(R"(\s+)", false, "test");
  EXPECT_EQ(spaces.find_all("a\xC2\x85 b"), (std::vector<Span>{{1, 4}}));
}

// Like HF tokenizers' Digits (Rust char::is_numeric): every Unicode number (Nd, Nl, No), not
// only ASCII digits; SmolLM2's tokenizer depends on it.
TEST(PreTokenizer, DigitsSplitsEveryUnicodeNumber) {
  auto split = [](bool individual, const std::string& text) {
    nlohmann::json spec = {{"type", "Digits"}, {"individual_digits", individual}};
    auto pre = parse_pre_tokenizer(JsonAt(spec, "test", "pre_tokenizer"));
    std::vector<Piece> pieces{{text, true}};
    pre->apply(pieces);
    std::vector<std::string> out;
    for (const Piece& p : pieces) out.push_back(p.text);
    return out;
  };
  EXPECT_EQ(split(true, "a12 \u0663\u0664x\u2177\u00bd\u00b2"),
            (std::vector<std::string>{"a", "1", "2", " ", "\u0663", "\u0664", "x", "\u2177", "\u00bd", "\u00b2"}));
  EXPECT_EQ(split(false, "a12 \u0663\u0664x\u2177\u00bd"),
            (std::vector<std::string>{"a", "12", " ", "\u0663\u0664", "x", "\u2177\u00bd"}));
}

}  // namespace
}  // namespace skim::tok
