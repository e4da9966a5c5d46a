// UTF-8 helpers. Invalid input is replaced the way Python's errors="replace" does it (one
// U+FFFD per maximal invalid subpart), so skim and Hugging Face see the same text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace skim::tok {

struct Utf8Step {
  size_t length;   // bytes of the valid character, or of the invalid subpart to replace
  bool valid;
  bool truncated;  // invalid only because the input ends before the character does
};

Utf8Step utf8_step(std::string_view text, size_t pos);
bool utf8_valid(std::string_view text);
std::string utf8_replace_invalid(std::string_view text);
// Splits off a trailing partial character that more bytes could still complete.
size_t utf8_complete_prefix(std::string_view text);

// Valid UTF-8 only: the code point at pos and its length.
char32_t utf8_decode(std::string_view text, size_t pos, size_t* length);
void utf8_append(std::string& out, char32_t cp);

// The Unicode White_Space property (Rust's char::is_whitespace).
bool is_unicode_whitespace(char32_t cp);
// Letters, digits and '_' (what Hugging Face's single_word added tokens treat as a word).
bool is_word_char(char32_t cp);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace skim::tok
