#include "engine/utf8.h"

namespace skim {

namespace {
// Expected length of a sequence from its lead byte; 0 for a continuation or invalid byte.
int lead_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xc2 && b < 0xe0) return 2;
  if (b >= 0xe0 && b < 0xf0) return 3;
  if (b >= 0xf0 && b < 0xf5) return 4;
  return 0;
}
bool is_cont(unsigned char b) { return (b & 0xc0) == 0x80; }

// Length of the valid sequence at s[i], or 0 when invalid; -1 when valid so far but cut off.
int valid_at(std::string_view s, size_t i) {
  int n = lead_length(static_cast<unsigned char>(s[i]));
  if (n == 0) return 0;
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -1;
    unsigned char c = static_cast<unsigned char>(s[i + k]);
    if (!is_cont(c)) return 0;
    if (k == 1) {  // overlongs, surrogates and > U+10FFFF are rejected at the second byte
      unsigned char b = static_cast<unsigned char>(s[i]);
      if ((b == 0xe0 && c < 0xa0) || (b == 0xed && c > 0x9f) || (b == 0xf0 && c < 0x90) ||
          (b == 0xf4 && c > 0x8f))
        return 0;
    }
  }
  return n;
}
}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    int n = valid_at(s, i);
    if (n < 0) return i;
    i += n == 0 ? 1 : size_t(n);
  }
  return i;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    int n = valid_at(s, i);
    if (n <= 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, size_t(n)));
      i += size_t(n);
    }
  }
  return out;
}

}  // namespace skim
