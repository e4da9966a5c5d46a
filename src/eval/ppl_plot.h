// `skim eval --plot FILE.png`: perplexity by position bucket, one line per policy.
#pragma once

#include <filesystem>

#include "eval/eval_runner.h"
#include "eval/plot/line_chart.h"

namespace skim::eval {

LineChart perplexity_chart(const EvalResults& r);
void write_perplexity_plot(const EvalResults& r, const std::filesystem::path& path);

}  // namespace skim::eval
