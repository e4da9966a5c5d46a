// A 5x8 bitmap font for printable ASCII (the classic 5x7 LCD glyphs, with one row below the
// baseline for descenders). Each glyph is 5 columns, bit 0 the top row.
#pragma once

#include <array>
#include <cstdint>

namespace skim::eval {

constexpr int kGlyphWidth = 5;
constexpr int kGlyphHeight = 8;
constexpr int kGlyphAdvance = 6;  // one blank column between letters

// Columns of `ch`; characters outside ' '..'~' draw as '?'.
const std::array<uint8_t, 5>& glyph(char ch);

}  // namespace skim::eval
