#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/utf8.h"

#include <pcre2.h>

#include <memory>

namespace skim::tok {

Utf8Step utf8_step(std::string_view text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) return {1, true, false};
  size_t continuation = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    continuation = 2;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    continuation = 3;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return {1, false, false};
  }
  for (size_t k = 1; k <= continuation; ++k) {
    if (pos + k >= text.size()) return {k, false, true};
    const auto byte = static_cast<unsigned char>(text[pos + k]);
    const bool ok = k == 1 ? (byte >= lo && byte <= hi) : (byte >= 0x80 && byte <= 0xBF);
    if (!ok) return {k, false, false};
  }
  return {continuation + 1, true, false};
}

bool utf8_valid(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    Utf8Step step = utf8_step(text, pos);
    if (!step.valid) return false;
    pos += step.length;
  }
  return true;
}

std::string utf8_replace_invalid(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    Utf8Step step = utf8_step(text, pos);
    if (step.valid) {
      out.append(text.substr(pos, step.length));
    } else {
      out.append(kReplacementChar);
    }
    pos += step.length;
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view text) {
  // A partial character is at most 3 bytes long: only the last few bytes can be one.
  size_t start = text.size() > 3 ? text.size() - 3 : 0;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  for (size_t pos = start; pos < text.size();) {
    Utf8Step step = utf8_step(text, pos);
    if (step.truncated) return pos;
    pos += step.length;
  }
  return text.size();
}

char32_t utf8_decode(std::string_view text, size_t pos, size_t* length) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  auto cont = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + k]) & 0x3F); };
  if (b0 < 0x80) {
    *length = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *length = 2;
    return (char32_t(b0 & 0x1F) << 6) | cont(1);
  }
  if (b0 < 0xF0) {
    *length = 3;
    return (char32_t(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
  }
  *length = 4;
  return (char32_t(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  // Unicode Alphabetic or a number (Rust's char::is_alphanumeric, which `tokenizers` uses),
  // through PCRE2's Unicode tables. Compiled once; match data per call keeps it thread-safe.
  static const std::unique_ptr<pcre2_code, void (*)(pcre2_code*)> re = [] {
    int err = 0;
    PCRE2_SIZE at = 0;
    const char* pattern = "[\\p{Alphabetic}\\p{N}]";
    return std::unique_ptr<pcre2_code, void (*)(pcre2_code*)>(
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                      &err, &at, nullptr),
        pcre2_code_free);
  }();
  if (!re || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  std::string ch;
  utf8_append(ch, cp);
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(re.get(), nullptr), pcre2_match_data_free);
  return pcre2_match(re.get(), reinterpret_cast<PCRE2_SPTR>(ch.data()), ch.size(), 0, PCRE2_ANCHORED, md.get(),
                     nullptr) >= 0;
}

}  // namespace skim::tok
