#include "eval/report.h"

#include <fmt/format.h>

#include <algorithm>

namespace skim::eval {

namespace {

std::string depth_key(double d) { return fmt::format("{:g}", d); }

nlohmann::json work_json(const DecodeWork& w, int head_dim) {
  WorkSummary s = summarize(w, head_dim);
  return {{"decode_steps", w.steps},
          {"kv_bytes_per_step", s.bytes_per_step},
          {"dense_kv_bytes_per_step", s.dense_bytes_per_step},
          {"kv_bytes_relative_to_dense", s.relative_to_dense},
          {"rectify_bytes_per_step", s.rectify_bytes_per_step},
          {"metadata_bytes_per_step", w.steps ? double(w.metadata_bytes) / double(w.steps) : 0.0},
          {"rectified_tokens", w.rectified_tokens},
          {"decode_seconds", w.seconds},
          {"decode_tokens_per_s", s.tokens_per_second},
          {"decode_first_step_seconds", s.first_step_seconds}};
}

// A retrieval tally as JSON: name(key) -> length -> accuracy, with the detail by depth.
template <class Name>
nlohmann::json tally_json(const RetrievalTally& t, Name name) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, by_length] : t.cells)
    for (const auto& [length, cell] : by_length) {
      nlohmann::json depths = nlohmann::json::object();
      for (const auto& [d, ct] : cell.by_depth) depths[depth_key(d)] = {{"correct", ct.first}, {"total", ct.second}};
      out[name(key)][std::to_string(length)] = {
          {"correct", cell.correct}, {"total", cell.total}, {"accuracy", cell.accuracy()}, {"by_depth", depths}};
    }
  return out;
}

// Accuracies of one tally row (one key) over the lengths: "0.90/0.75/-".
std::string accuracy_row(const RetrievalTally& t, int key, const std::vector<int>& lengths) {
  std::vector<std::string> acc;
  for (int l : lengths) {
    auto it = t.cells.find(key);
    const RetrievalCell* c = it != t.cells.end() && it->second.count(l) ? &it->second.at(l) : nullptr;
    acc.push_back(c ? fmt::format("{:.2f}", c->accuracy()) : "-");
  }
  return fmt::format("{}", fmt::join(acc, "/"));
}

// Copies ahead of a layer's query (LocalityStats::ahead_*), per guess: the lists it was made
// for, their misses per list, the share of the misses it hides (recall) and of its copies that
// are read (precision), and its copies per miss.
nlohmann::json prefetch_json(const LocalityStats& s) {
  const auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  nlohmann::json j = nlohmann::json::object();
  for (size_t g = 0; g < kAheadGuesses.size(); ++g)
    j[kAheadGuesses[g]] = {{"lists", s.ahead_lists[g]},
                           {"misses_per_list", ratio(s.ahead_misses[g], s.ahead_lists[g])},
                           {"recall", ratio(s.ahead_useful[g], s.ahead_misses[g])},
                           {"precision", ratio(s.ahead_useful[g], s.ahead_copied[g])},
                           {"copies_per_miss", ratio(s.ahead_copied[g], s.ahead_misses[g])}};
  return j;
}

// Means over the observed (layer, KV head, step) lists; empty for a policy that chose nothing.
nlohmann::json locality_json(const LocalityStats& s) {
  if (s.lists == 0) return nlohmann::json::object();
  const double n = s.lists;
  nlohmann::json hit = nlohmann::json::object();
  for (size_t i = 0; i < kLocalityCacheSizes.size(); ++i)
    hit[fmt::format("{}x", kLocalityCacheSizes[i])] = s.lookups[i] > 0 ? s.hits[i] / s.lookups[i] : 0.0;
  return {{"lists", s.lists},
          {"keys_per_list", s.keys / n},
          {"pages_per_list", s.pages / n},
          {"context_pages_per_list", s.context_pages / n},
          {"page_keys_over_chosen_keys", s.keys > 0 ? s.page_keys / s.keys : 0.0},
          {"step_page_overlap", s.repeats > 0 ? s.overlap / s.repeats : 0.0},
          {"lru_hit_rate", hit},
          {"copies_ahead", prefetch_json(s)}};
}

// Per layer means of a needle coverage meter.
nlohmann::json coverage_json(const NeedleCoverageMeter& m) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerCoverage& l : m.layers()) {
    const double n = double(std::max<uint64_t>(l.samples, 1)), steps = double(std::max<uint64_t>(l.steps, 1));
    layers.push_back({{"needle_mass", l.needle_mass / n},
                      {"needle_kept", l.needle_mass > 0 ? l.kept_needle / l.needle_mass : 1.0},
                      {"mass_kept", l.kept_mass / n},
                      {"top_head_needle_mass", l.top_needle / steps},
                      {"top_head_needle_kept", l.top_kept / steps},
                      {"steps", l.steps}});
  }
  return layers;
}

nlohmann::json policy_json(const PolicyResult& p, const EvalResults& r) {
  nlohmann::json j = {{"policy", p.policy}};
  if (p.nll) j["perplexity"] = {{"buckets", p.nll->perplexity()}, {"overall", p.nll->overall()}};
  if (p.error) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerError& l : p.error->per_layer())
      layers.push_back({{"mean", l.mean}, {"p90", l.p90}, {"samples", l.samples}});
    j["output_error"] = {{"mean", p.error->mean()}, {"layers", layers}};
  }
  if (!p.retrieval.cells.empty())
    j["passkey"] = tally_json(p.retrieval, [](int keys) { return std::to_string(keys); });  // keys -> length
  if (!p.needle.cells.empty())  // kind -> length
    j["needle"] = tally_json(p.needle, [&](int kind) { return r.options.needles[size_t(kind)]; });
  if (p.coverage_found || p.coverage_lost)
    j["needle_coverage"] = {{"found", p.coverage_found ? coverage_json(*p.coverage_found) : nlohmann::json::array()},
                            {"lost", p.coverage_lost ? coverage_json(*p.coverage_lost) : nlohmann::json::array()}};
  if (p.locality) j["locality"] = locality_json(*p.locality);
  if (p.agreement)
    j["agreement"] = {{"tokens", p.agreement->tokens},
                      {"runs", p.agreement->runs},
                      {"first_divergence", p.agreement->mean_first_divergence()},
                      {"edit_similarity", p.agreement->mean_similarity()}};
  j["work"] = work_json(p.work(), r.head_dim);
  j["work_windows"] = work_json(p.window_work, r.head_dim);
  j["work_passkey"] = work_json(p.retrieval_work, r.head_dim);
  nlohmann::json counters = nlohmann::json::object();
  for (const auto& [k, v] : p.counters) counters[k] = v.first / v.second;
  j["counters"] = counters;
  return j;
}

std::string k_tokens(int n) { return n % 1024 == 0 ? fmt::format("{}K", n / 1024) : std::to_string(n); }

}  // namespace

nlohmann::json to_json(const EvalResults& r) {
  const EvalOptions& o = r.options;
  std::vector<std::string> data;
  for (const auto& p : o.data) data.push_back(p.string());
  nlohmann::json j = {{"model", r.model},
                      {"ctx", o.ctx},
                      {"tasks", std::vector<std::string>(o.tasks.begin(), o.tasks.end())},
                      {"decode_tokens", o.decode_tokens},
                      {"window_prefill_tokens", r.window_prefill},
                      {"buckets", o.buckets},
                      {"docs", o.docs},
                      {"lengths", o.lengths},
                      {"prompts", o.prompts},
                      {"depths", o.depths},
                      {"keys", o.keys},
                      {"needles", o.needles},
                      {"needle_tokens", o.needle_tokens},
                      {"question", o.question_dense ? "dense" : "policy"},
                      {"coverage", o.coverage},
                      {"locality", o.locality},
                      {"agree_tokens", o.agree_tokens},
                      {"seed", o.seed},
                      {"data", data},
                      {"seconds", r.seconds}};
  nlohmann::json policies = nlohmann::json::array();
  for (const PolicyResult& p : r.policies) policies.push_back(policy_json(p, r));
  j["policies"] = policies;
  return j;
}

std::string format_table(const EvalResults& r) {
  const EvalOptions& o = r.options;
  std::vector<std::string> header = {"policy"};
  if (o.has("ppl")) {
    for (int b = 0; b < o.buckets; ++b) header.push_back(fmt::format("ppl q{}", b + 1));
    header.push_back("ppl");
  }
  if (o.has("error")) header.push_back("out err");
  std::vector<std::string> lens;
  for (int l : o.lengths) lens.push_back(k_tokens(l));
  if (o.has("passkey"))
    for (int k : o.keys) header.push_back(fmt::format("{}-key {}", k, fmt::join(lens, "/")));
  if (o.has("needle"))
    for (const std::string& k : o.needles) header.push_back(fmt::format("needle {} {}", k, fmt::join(lens, "/")));
  if (o.has("agree")) header.push_back(fmt::format("agree {} (div, sim)", o.agree_tokens));
  header.push_back("KV read");
  header.push_back("tok/s");
  header.push_back("1st step s");

  std::vector<std::vector<std::string>> rows = {header};
  for (const PolicyResult& p : r.policies) {
    std::vector<std::string> row = {p.policy};
    if (p.nll) {
      for (double x : p.nll->perplexity()) row.push_back(fmt::format("{:.3f}", x));
      row.push_back(fmt::format("{:.3f}", p.nll->overall()));
    }
    if (p.error) row.push_back(fmt::format("{:.4f}", p.error->mean()));
    if (o.has("passkey"))
      for (int k : o.keys) row.push_back(accuracy_row(p.retrieval, k, o.lengths));
    if (o.has("needle"))
      for (size_t k = 0; k < o.needles.size(); ++k) row.push_back(accuracy_row(p.needle, int(k), o.lengths));
    if (p.agreement)
      row.push_back(fmt::format("{:.0f}, {:.3f}", p.agreement->mean_first_divergence(), p.agreement->mean_similarity()));
    WorkSummary s = summarize(p.work(), r.head_dim);
    row.push_back(fmt::format("{:.3f}x", s.relative_to_dense));
    row.push_back(fmt::format("{:.1f}", s.tokens_per_second));
    row.push_back(fmt::format("{:.2f}", s.first_step_seconds));
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t c = 0; c < rows[i].size(); ++c) {
      if (c == 0)
        out += fmt::format("{:<{}}", rows[i][c], width[c]);
      else
        out += fmt::format("  {:>{}}", rows[i][c], width[c]);
    }
    out += "\n";
    if (i == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  std::string notes;
  if (o.has("ppl"))
    notes += fmt::format("ppl: {} teacher-forced decode tokens after a dense prefill of {}, in {} buckets; ",
                         o.decode_tokens, r.window_prefill, o.buckets);
  if (o.has("error")) notes += "out err: mean ||o - o_dense|| / ||o_dense|| over layers, steps and heads; ";
  notes += "KV read: bytes per decode step relative to dense (incl. metadata and rectification); tok/s: decode steps "
           "after each run's first; 1st step s: that first step (where cs builds its tables and mac its ring states)";
  out += notes + "\n";
  return out;
}

}  // namespace skim::eval
