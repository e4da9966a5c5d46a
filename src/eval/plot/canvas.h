// A small RGB raster for report plots: pixels, lines, rectangles and text in a built-in
// bitmap font. Enough for a line chart; no anti-aliasing.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace skim::eval {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background = {255, 255, 255});
  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }  // rows of r, g, b
  Rgb at(int x, int y) const;

  void set(int x, int y, Rgb c);  // clipped
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // inclusive corners
  void rect(int x0, int y0, int x1, int y1, Rgb c);       // outline
  // A line `thickness` pixels wide; `dash` > 0 draws dash-pixel segments with gaps.
  void line(double x0, double y0, double x1, double y1, Rgb c, int thickness = 1, int dash = 0);
  // Text with its top-left corner at (x, y), each font pixel drawn scale x scale.
  void text(int x, int y, std::string_view s, Rgb c, int scale = 1);
  // Text rotated a quarter turn counter-clockwise (reads bottom to top), for a y-axis label.
  void text_vertical(int x, int y, std::string_view s, Rgb c, int scale = 1);
  static int text_width(std::string_view s, int scale = 1);
  static int text_height(int scale = 1);

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;
};

}  // namespace skim::eval
