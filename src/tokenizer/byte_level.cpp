#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace skim::tok {

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> to_char;
  std::array<int, 512> to_byte;  // every mapped code point is below 512

  ByteLevelTables() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the others are shifted above U+0100.
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? char32_t(b) : char32_t(256 + shifted++);
      utf8_append(to_char[b], cp);
      to_byte[cp] = b;
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

const std::string& byte_level_char(unsigned char byte) { return tables().to_char[byte]; }

bool byte_level_to_bytes(std::string_view token, std::string& bytes) {
  const auto& t = tables();
  bytes.clear();
  for (size_t pos = 0; pos < token.size();) {
    Utf8Step step = utf8_step(token, pos);
    if (!step.valid) return false;
    size_t length = 0;
    const char32_t cp = utf8_decode(token, pos, &length);
    if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return false;
    bytes += static_cast<char>(t.to_byte[cp]);
    pos += length;
  }
  return true;
}

}  // namespace skim::tok
