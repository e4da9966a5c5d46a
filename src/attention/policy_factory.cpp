// make_policy: a parsed policy string becomes a pipeline of stages. Every parameter is
// range-checked and every combination that makes no sense is refused, with the reason.
#include "attention/pipeline.h"
#include "attention/selectors.h"
#include "core/error.h"

namespace skim {

namespace {

void require_range(const PolicyPart& p, const std::string& key, double v, double lo, double hi) {
  SKIM_REQUIRE(v >= lo && v <= hi, "--policy: {}:{}={} is out of range [{}, {}]", p.name, key, v, lo, hi);
}

std::unique_ptr<Selector> make_selector(const PolicyPart& p, int& dense_layers) {
  if (p.name == "dense") return nullptr;
  if (p.name == "streaming") {
    StreamingParams s;
    s.sink = p.integer("sink", s.sink);
    s.window = p.integer("window", s.window);
    require_range(p, "sink", s.sink, 0, 1e9);
    require_range(p, "window", s.window, 1, 1e9);
    return std::make_unique<StreamingSelector>(s);
  }
  if (p.name == "quest") {
    QuestParams q;
    q.budget = p.number("budget", q.budget);
    q.min_tokens = p.integer("min", q.min_tokens);
    dense_layers = p.integer("dense_layers", 2);  // Quest's practice
    SKIM_REQUIRE(q.budget > 0, "--policy: quest:budget={} must be > 0 (a fraction <= 1 or tokens > 1)", q.budget);
    require_range(p, "min", q.min_tokens, 0, 1e9);
    return std::make_unique<QuestSelector>(q);
  }
  // gbsa, and resa's selection part
  GroupBlockParams g;
  g.keep = p.number("keep", g.keep);
  g.n_min = p.integer("n_min", g.n_min);
  g.n_local = p.integer("n_local", g.n_local);
  dense_layers = p.integer("dense_layers", 0);  // ReSA sparsifies every layer
  SKIM_REQUIRE(g.keep > 0 && g.keep <= 1, "--policy: {}:keep={} must be in (0, 1]", p.name, g.keep);
  require_range(p, "n_min", g.n_min, 1, 1e9);
  require_range(p, "n_local", g.n_local, 0, 1e9);
  return std::make_unique<GroupBlockSelector>(g);
}

bool is_selector(const std::string& name) {
  return name == "dense" || name == "streaming" || name == "quest" || name == "gbsa" || name == "resa";
}

}  // namespace

std::unique_ptr<AttentionPolicy> make_policy(const std::string& text) {
  PolicySpec spec = parse_policy_spec(text);
  PipelineConfig config;
  config.spec = spec.canonical();
  const PolicyPart* selector = nullptr;
  for (const PolicyPart& p : spec.parts) {
    if (!is_selector(p.name)) continue;
    SKIM_REQUIRE(!selector, "--policy '{}': '{}' and '{}' both choose the keys; use one", text,
                 selector ? selector->name : "", p.name);
    selector = &p;
  }
  if (selector) config.selector = make_selector(*selector, config.dense_layers);
  require_range(selector ? *selector : spec.parts[0], "dense_layers", config.dense_layers, 0, 1e6);

  int f = 0;
  if (const PolicyPart* r = spec.find("rectify")) f = r->integer("f", 32);
  if (selector && selector->name == "resa") f = selector->integer("f", 32);
  if (f != 0 || spec.find("rectify")) {
    SKIM_REQUIRE(f >= 1, "--policy '{}': rectify f={} must be >= 1", text, f);
    SKIM_REQUIRE(config.selector != nullptr,
                 "--policy '{}': rectify repairs KV written under sparse attention; with dense "
                 "attention there is nothing to rectify",
                 text);
    config.corrections.rectify_every = f;
  }
  return std::make_unique<PipelinePolicy>(std::move(config));
}

}  // namespace skim
