// The PNG plot: nice ticks, something drawn, a valid PNG file.
#include <gtest/gtest.h>

#include <fstream>

#include "eval/plot/bitmap_font.h"
#include "eval/plot/line_chart.h"
#include "eval/plot/png_file.h"

namespace skim::eval {
namespace {

TEST(Plot, NiceTicksCoverTheRangeInRoundSteps) {
  std::vector<double> t = nice_ticks(3.2, 17.9);
  ASSERT_GE(t.size(), 3u);
  EXPECT_LE(t.front(), 3.2);
  EXPECT_GE(t.back(), 17.9);
  EXPECT_NEAR(t[1] - t[0], 5.0, 1e-12);  // 14.7 / 5 intervals rounds up to 5
  EXPECT_NEAR(nice_ticks(0, 9)[1], 2.0, 1e-12);
  std::vector<double> flat = nice_ticks(5, 5);  // a flat series still gets an axis
  EXPECT_LT(flat.front(), 5);
  EXPECT_GT(flat.back(), 5);
}

TEST(Plot, FontHasGlyphsAndBlankSpace) {
  EXPECT_EQ(glyph(' '), (std::array<uint8_t, 5>{0, 0, 0, 0, 0}));
  EXPECT_NE(glyph('A'), glyph('B'));
  EXPECT_EQ(glyph('\x01'), glyph('?'));
}

TEST(Plot, RendersSeriesAndWritesAPng) {
  LineChart c;
  c.title = "perplexity";
  c.x_label = "tokens";
  c.y_label = "ppl";
  c.series = {{"dense", {256, 768, 1280, 1792}, {5.1, 4.2, 3.9, 3.6}},
              {"quest", {256, 768, 1280, 1792}, {5.3, 4.6, 4.4, 4.3}}};
  Canvas cv = render(c);
  size_t coloured = 0;
  for (int y = 0; y < cv.height(); ++y)
    for (int x = 0; x < cv.width(); ++x) {
      Rgb p = cv.at(x, y);
      if (p.r != p.g || p.g != p.b) ++coloured;  // series colours, not grey ink
    }
  EXPECT_GT(coloured, 1000u);
  auto path = std::filesystem::temp_directory_path() / "skim_plot_test.png";
  write_png(cv, path);
  std::ifstream in(path, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  EXPECT_GT(std::filesystem::file_size(path), 1000u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace skim::eval
