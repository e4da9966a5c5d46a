// make_policy: a parsed policy string becomes a pipeline of stages. The parser has checked
// every value against the registry (policy_registry.h); here every combination that makes no
// sense is refused, with the reason.
#include <algorithm>

#include "attention/csattn.h"
#include "attention/policy_registry.h"
#include "attention/pipeline.h"
#include "attention/retro.h"
#include "attention/selectors.h"
#include "core/error.h"

namespace skim {

namespace {

std::unique_ptr<Selector> make_cs_selector(const PolicyPart& p, int& dense_layers) {
  CsParams c = cs_params(p);
  dense_layers = c.dense_layers;
  return std::make_unique<CsSelector>(c);
}

// RetroAttention needs a selector of pages (its mask is per page) and composes with nothing
// that changes which keys a row reads or in what order (its states are merged exactly).
std::unique_ptr<AttentionPolicy> make_retro_policy(const std::string& text, const PolicySpec& spec,
                                                   const PolicyPart& r, const PolicyPart* selector,
                                                   PipelineConfig config) {
  const int w = r.integer("w", kRetroWindow);
  const std::string base = selector ? selector->name : "none";
  SKIM_REQUIRE(base == "quest" || base == "gbsa" || base == "resa",
               "policy '{}': retro updates past queries with pages selected now, so it needs a page "
               "selector (quest, gbsa or resa), not {}",
               text, base);
  for (const PolicyPart& p : spec.parts)
    SKIM_REQUIRE(p.name == base || p.name == "retro" || p.name == "rectify",
                 "policy '{}': retro does not compose with '{}'", text, p.name);
  // A past row's supplements are whole pages below the current one, which the base must keep.
  SKIM_REQUIRE(base == "quest" || selector->integer("n_local", 1) >= 1,
               "policy '{}': retro needs {}:n_local >= 1 (the current page kept)", text, base);
  return std::make_unique<RetroPolicy>(std::move(config), w);
}

}  // namespace

StreamingParams streaming_params(const PolicyPart& p) {
  StreamingParams s;
  p.read("sink", s.sink, "window", s.window);
  return s;
}

GroupBlockParams group_block_params(const PolicyPart& p, int& dense_layers) {
  GroupBlockParams g;
  p.read("keep", g.keep, "n_min", g.n_min, "n_local", g.n_local);
  dense_layers = p.integer("dense_layers", 0);  // ReSA sparsifies every layer
  return g;
}

QuestParams quest_params(const PolicyPart& p, int& dense_layers) {
  QuestParams q;
  p.read("budget", q.budget, "min", q.min_tokens);
  dense_layers = p.integer("dense_layers", kQuestDenseLayers);
  return q;
}

namespace {

std::unique_ptr<Selector> make_selector(const PolicyPart& p, int& dense_layers) {
  if (p.name == "dense") return nullptr;
  if (p.name == "streaming") return std::make_unique<StreamingSelector>(streaming_params(p));
  if (p.name == "cs") return make_cs_selector(p, dense_layers);
  if (p.name == "quest") return std::make_unique<QuestSelector>(quest_params(p, dense_layers));
  if (p.name == "oracle") {  // evaluation: the exact top keys per head
    QuestParams q;
    q.budget = p.number("budget", kOracleBudget);
    q.min_tokens = p.integer("min", 0);
    dense_layers = p.integer("dense_layers", 0);
    return std::make_unique<OracleSelector>(q);
  }
  return std::make_unique<GroupBlockSelector>(group_block_params(p, dense_layers));  // gbsa, resa
}

// MAC's reuse stage (DESIGN.md section 9 defaults). Rectification rewrites K/V that the cached
// prefix states summarise, so MAC refuses it rather than serve stale states.
std::unique_ptr<MacReuse> make_mac(const std::string& text, const PolicySpec& spec, const PolicyPart& p) {
  const MacParams m = mac_params(p);
  SKIM_REQUIRE(!spec.find("rectify") && !spec.find("resa"),
               "policy '{}': mac caches prefix states of keys that rectification rewrites; use gbsa "
               "instead of resa, or drop rectify",
               text);
  return std::make_unique<MacReuse>(m);
}

// The order ART visits a base's keys in: art:order for a dense base; the base's own priority
// for quest, gbsa/resa and cs; recent window first with sinks pinned for streaming.
ArtOrder art_order(const ArtParams& a, const PolicyPart* selector) {
  if (!selector || selector->name == "dense") return a.dense_order;
  return selector->name == "streaming" ? ArtOrder::Streaming : ArtOrder::Given;
}

bool is_selector(const std::string& name) {
  return name == "dense" || name == "streaming" || name == "quest" || name == "oracle" || name == "gbsa" ||
         name == "resa" || name == "cs";
}

}  // namespace

std::unique_ptr<AttentionPolicy> make_policy(const std::string& text) {
  PolicySpec spec = parse_policy_spec(text);
  PipelineConfig config;
  config.spec = spec.canonical();
  const PolicyPart* selector = nullptr;
  for (const PolicyPart& p : spec.parts) {
    if (!is_selector(p.name)) continue;
    SKIM_REQUIRE(!selector, "policy '{}': '{}' and '{}' both choose the keys; use one", text,
                 selector ? selector->name : "", p.name);
    selector = &p;
  }
  if (selector) config.selector = make_selector(*selector, config.dense_layers);

  int f = 0;
  const PolicyPart* rectifier = spec.find("rectify");
  if (selector && selector->name == "resa") rectifier = selector;  // resa = gbsa + rectify
  if (rectifier) f = rectifier->integer("f", kRectifyEvery);
  if (rectifier) {
    SKIM_REQUIRE(config.selector != nullptr,
                 "policy '{}': rectify repairs KV written under sparse attention; with dense "
                 "attention there is nothing to rectify",
                 text);
    config.corrections.rectify_every = f;
  }
  if (selector && selector->name == "cs") config.corrections.prompt_queries = kAllPromptQueries;
  if (const PolicyPart* m = spec.find("mac")) {
    config.mac = make_mac(text, spec, *m);
    config.corrections.prompt_queries = std::max(config.corrections.prompt_queries, config.mac->params().window);
  }
  if (const PolicyPart* a = spec.find("art")) {
    config.art = art_params(text, *a, selector, config.mac != nullptr);
    config.art_order = art_order(*config.art, selector);
  }
  if (const PolicyPart* r = spec.find("retro")) return make_retro_policy(text, spec, *r, selector, std::move(config));
  return std::make_unique<PipelinePolicy>(std::move(config));
}

}  // namespace skim

namespace skim {

void check_policy_spec(const std::string& spec) { make_policy(spec); }

}  // namespace skim
