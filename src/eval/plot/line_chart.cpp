#include "eval/plot/line_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace skim::eval {

namespace {

// Distinguishable colours (Tableau 10), then repeated with dashes.
const std::vector<Rgb> kPalette = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},
                                   {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {127, 127, 127},
                                   {188, 189, 34},  {23, 190, 207}};
const Rgb kInk{30, 30, 30}, kGrid{225, 225, 225};

std::string tick_label(double v, double step) {
  int decimals = step >= 1 ? 0 : int(std::ceil(-std::log10(step) - 1e-9));
  return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) {
    double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  double raw = (hi - lo) / std::max(1, target - 1);
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double v = std::floor(lo / step) * step; v <= hi + step * 0.999; v += step) ticks.push_back(v);
  return ticks;
}

Canvas render(const LineChart& c) {
  Canvas cv(c.width, c.height);
  const int s = 2;  // font scale
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const Series& sr : c.series)
    for (size_t i = 0; i < sr.x.size(); ++i) {
      xlo = std::min(xlo, sr.x[i]);
      xhi = std::max(xhi, sr.x[i]);
      ylo = std::min(ylo, sr.y[i]);
      yhi = std::max(yhi, sr.y[i]);
    }
  if (!std::isfinite(xlo)) xlo = 0, xhi = 1, ylo = 0, yhi = 1;
  std::vector<double> xt = nice_ticks(xlo, xhi), yt = nice_ticks(ylo, yhi);
  double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;

  int label_w = 0;
  for (double v : yt) label_w = std::max(label_w, Canvas::text_width(tick_label(v, ystep), s));
  // The legend sits right of the plot area so it never hides a line.
  int legend_w = 0;
  for (const Series& sr : c.series) legend_w = std::max(legend_w, Canvas::text_width(sr.name, s));
  legend_w += 60;
  const int left = 24 + Canvas::text_height(s) + 12 + label_w + 10, right = c.width - 24 - legend_w - 16;
  const int top = 24 + Canvas::text_height(s) + 16, bottom = c.height - (24 + 2 * Canvas::text_height(s) + 24);
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (right - left); };
  auto py = [&](double y) { return bottom - (y - y0) / (y1 - y0) * (bottom - top); };

  // Grid, ticks and tick labels.
  for (double v : yt) {
    int y = int(std::lround(py(v)));
    cv.fill_rect(left, y, right, y, kGrid);
    cv.fill_rect(left - 6, y, left, y, kInk);
    std::string l = tick_label(v, ystep);
    cv.text(left - 10 - Canvas::text_width(l, s), y - Canvas::text_height(s) / 2 + 1, l, kInk, s);
  }
  for (double v : xt) {
    int x = int(std::lround(px(v)));
    cv.fill_rect(x, top, x, bottom, kGrid);
    cv.fill_rect(x, bottom, x, bottom + 6, kInk);
    std::string l = tick_label(v, xstep);
    cv.text(x - Canvas::text_width(l, s) / 2, bottom + 10, l, kInk, s);
  }
  cv.rect(left, top, right, bottom, kInk);

  // Labels and title.
  cv.text((left + right - Canvas::text_width(c.x_label, s)) / 2, c.height - 24 - Canvas::text_height(s), c.x_label, kInk, s);
  cv.text_vertical(24, (top + bottom - Canvas::text_width(c.y_label, s)) / 2, c.y_label, kInk, s);
  cv.text((c.width - Canvas::text_width(c.title, s)) / 2, 20, c.title, kInk, s);

  // Series: lines with a square marker at each point.
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& sr = c.series[k];
    Rgb col = kPalette[k % kPalette.size()];
    int dash = k < kPalette.size() ? 0 : 8;
    for (size_t i = 0; i + 1 < sr.x.size(); ++i)
      cv.line(px(sr.x[i]), py(sr.y[i]), px(sr.x[i + 1]), py(sr.y[i + 1]), col, 3, dash);
    for (size_t i = 0; i < sr.x.size(); ++i) {
      int x = int(std::lround(px(sr.x[i]))), y = int(std::lround(py(sr.y[i])));
      cv.fill_rect(x - 4, y - 4, x + 4, y + 4, col);
    }
  }

  // Legend: a box right of the plot area, top-aligned with it.
  const int row_h = Canvas::text_height(s) + 8, box_w = legend_w, box_h = int(c.series.size()) * row_h + 10;
  int bx = right + 16, by = top;
  cv.rect(bx, by, bx + box_w, by + box_h, kInk);
  for (size_t k = 0; k < c.series.size(); ++k) {
    Rgb col = kPalette[k % kPalette.size()];
    int y = by + 6 + int(k) * row_h + Canvas::text_height(s) / 2;
    cv.line(bx + 8, y, bx + 40, y, col, 3, k < kPalette.size() ? 0 : 8);
    cv.text(bx + 48, y - Canvas::text_height(s) / 2 + 1, c.series[k].name, kInk, s);
  }
  return cv;
}

}  // namespace skim::eval
