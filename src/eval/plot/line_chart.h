// A line chart: several named series over shared x values, with axes, nice ticks, axis
// labels, a title and a legend, drawn on a Canvas.
#pragma once

#include <string>
#include <vector>

#include "eval/plot/canvas.h"

namespace skim::eval {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  int width = 1200, height = 600;
};

Canvas render(const LineChart& chart);

// Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.
std::vector<double> nice_ticks(double lo, double hi, int target_count = 6);

}  // namespace skim::eval
