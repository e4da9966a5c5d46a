#include "eval/ppl_plot.h"

#include <fmt/format.h>

#include "core/error.h"
#include "eval/plot/png_file.h"

namespace skim::eval {

LineChart perplexity_chart(const EvalResults& r) {
  const EvalOptions& o = r.options;
  LineChart chart;
  chart.title = fmt::format("perplexity under sparse decoding: {} tokens after a dense prefill of {}",
                            o.decode_tokens, r.window_prefill);
  chart.x_label = "decoded tokens after the prefill (bucket centre)";
  chart.y_label = "perplexity";
  for (const PolicyResult& p : r.policies) {
    if (!p.nll) continue;
    Series s;
    s.name = p.policy;
    std::vector<double> ppl = p.nll->perplexity();
    for (size_t b = 0; b < ppl.size(); ++b) {
      s.x.push_back((double(b) + 0.5) * o.decode_tokens / double(ppl.size()));
      s.y.push_back(ppl[b]);
    }
    chart.series.push_back(std::move(s));
  }
  return chart;
}

void write_perplexity_plot(const EvalResults& r, const std::filesystem::path& path) {
  SKIM_REQUIRE(r.options.has("ppl"), "--plot draws perplexity: add ppl to --tasks");
  write_png(render(perplexity_chart(r)), path);
}

}  // namespace skim::eval
