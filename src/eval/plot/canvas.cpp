#include "eval/plot/canvas.h"

#include <algorithm>
#include <cmath>

#include "eval/plot/bitmap_font.h"

namespace skim::eval {

Canvas::Canvas(int width, int height, Rgb bg) : width_(width), height_(height), pixels_(size_t(width) * height * 3) {
  for (size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = bg.r;
    pixels_[i + 1] = bg.g;
    pixels_[i + 2] = bg.b;
  }
}

Rgb Canvas::at(int x, int y) const {
  size_t i = (size_t(y) * width_ + x) * 3;
  return {pixels_[i], pixels_[i + 1], pixels_[i + 2]};
}

void Canvas::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  size_t i = (size_t(y) * width_ + x) * 3;
  pixels_[i] = c.r;
  pixels_[i + 1] = c.g;
  pixels_[i + 2] = c.b;
}

void Canvas::fill_rect(int x0, int y0, int x1, int y1, Rgb c) {
  for (int y = std::min(y0, y1); y <= std::max(y0, y1); ++y)
    for (int x = std::min(x0, x1); x <= std::max(x0, x1); ++x) set(x, y, c);
}

void Canvas::rect(int x0, int y0, int x1, int y1, Rgb c) {
  fill_rect(x0, y0, x1, y0, c);
  fill_rect(x0, y1, x1, y1, c);
  fill_rect(x0, y0, x0, y1, c);
  fill_rect(x1, y0, x1, y1, c);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb c, int thickness, int dash) {
  // Step along the longer axis one pixel at a time and stamp a square of the thickness.
  double dx = x1 - x0, dy = y1 - y0;
  int steps = std::max(1, int(std::ceil(std::max(std::fabs(dx), std::fabs(dy)))));
  int lo = -(thickness - 1) / 2, hi = thickness / 2;
  for (int i = 0; i <= steps; ++i) {
    if (dash > 0 && (i / dash) % 2 == 1) continue;
    int x = int(std::lround(x0 + dx * i / steps)), y = int(std::lround(y0 + dy * i / steps));
    for (int oy = lo; oy <= hi; ++oy)
      for (int ox = lo; ox <= hi; ++ox) set(x + ox, y + oy, c);
  }
}

void Canvas::text(int x, int y, std::string_view s, Rgb c, int scale) {
  for (char ch : s) {
    const auto& g = glyph(ch);
    for (int col = 0; col < kGlyphWidth; ++col)
      for (int row = 0; row < kGlyphHeight; ++row)
        if (g[size_t(col)] >> row & 1) fill_rect(x + col * scale, y + row * scale, x + col * scale + scale - 1, y + row * scale + scale - 1, c);
    x += kGlyphAdvance * scale;
  }
}

void Canvas::text_vertical(int x, int y, std::string_view s, Rgb c, int scale) {
  // (x, y) is the top-left of the rotated box; the text starts at the bottom.
  int base = y + text_width(s, scale) - 1;
  for (char ch : s) {
    const auto& g = glyph(ch);
    for (int col = 0; col < kGlyphWidth; ++col)
      for (int row = 0; row < kGlyphHeight; ++row)
        if (g[size_t(col)] >> row & 1) {
          int px = x + row * scale, py = base - col * scale;
          fill_rect(px, py - scale + 1, px + scale - 1, py, c);
        }
    base -= kGlyphAdvance * scale;
  }
}

int Canvas::text_width(std::string_view s, int scale) {
  return s.empty() ? 0 : (int(s.size()) * kGlyphAdvance - 1) * scale;
}

int Canvas::text_height(int scale) { return kGlyphHeight * scale; }

}  // namespace skim::eval
