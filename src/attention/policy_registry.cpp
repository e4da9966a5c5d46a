#include "attention/policy_registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace skim {

namespace {

// A default as a policy string would write it: 0.5, 3072, 1e-05.
std::string number_text(double v) { return fmt::format("{}", v); }

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& x : items) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

PolicyKey number_key(std::string name, double fallback, double lo, double hi, std::string help) {
  PolicyKey k;
  k.name = std::move(name);
  k.kind = PolicyKey::Kind::Number;
  k.fallback = number_text(fallback);
  k.lo = lo;
  k.hi = hi;
  k.help = std::move(help);
  return k;
}

PolicyKey fraction_key(std::string name, double fallback, std::string help) {
  PolicyKey k = number_key(std::move(name), fallback, 0, 1, std::move(help));
  k.lo_open = true;
  return k;
}

PolicyKey positive_key(std::string name, double fallback, std::string help) {
  PolicyKey k = number_key(std::move(name), fallback, 0, kNoUpperBound, std::move(help));
  k.lo_open = true;
  return k;
}

PolicyKey unit_key(std::string name, double fallback, std::string help) {
  PolicyKey k = number_key(std::move(name), fallback, 0, 1, std::move(help));
  k.hi_open = true;
  return k;
}

PolicyKey integer_key(std::string name, int fallback, int lo, int hi, std::string help) {
  PolicyKey k = number_key(std::move(name), fallback, lo, hi, std::move(help));
  k.kind = PolicyKey::Kind::Integer;
  return k;
}

PolicyKey choice_key(std::string name, std::string fallback, std::vector<std::string> choices, std::string help) {
  PolicyKey k;
  k.name = std::move(name);
  k.kind = PolicyKey::Kind::Choice;
  k.fallback = std::move(fallback);
  k.choices = std::move(choices);
  k.help = std::move(help);
  return k;
}

std::string PolicyKey::range_text() const {
  if (kind == Kind::Choice) return "one of " + join(choices);
  if (hi >= kNoUpperBound) return fmt::format("{} {}", lo_open ? ">" : ">=", lo);
  return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

void PolicyKey::check(const std::string& policy, const std::string& value) const {
  if (kind == Kind::Choice) {
    SKIM_REQUIRE(std::find(choices.begin(), choices.end(), value) != choices.end(),
                 "policy: {}:{}={} must be {}", policy, name, value, range_text());
    return;
  }
  double v = 0;
  const char* end = value.data() + value.size();
  if (kind == Kind::Integer) {
    int i = 0;
    auto [p, ec] = std::from_chars(value.data(), end, i);
    SKIM_REQUIRE(ec == std::errc() && p == end, "policy: {}:{}={} is not an integer", policy, name, value);
    v = i;
  } else {
    auto [p, ec] = std::from_chars(value.data(), end, v);
    SKIM_REQUIRE(ec == std::errc() && p == end && std::isfinite(v), "policy: {}:{}={} is not a finite number",
                 policy, name, value);
  }
  const bool low_ok = lo_open ? v > lo : v >= lo, high_ok = hi_open ? v < hi : v <= hi;
  SKIM_REQUIRE(low_ok && high_ok, "policy: {}:{}={} is out of range: it must be {}", policy, name, value,
               range_text());
}

const PolicyKey* PolicyInfo::key(const std::string& k) const {
  for (const PolicyKey& x : keys)
    if (x.name == k) return &x;
  return nullptr;
}

bool PolicyInfo::composes(const std::string& other) const {
  return std::find(composes_with.begin(), composes_with.end(), other) != composes_with.end();
}

bool PolicyInfo::runs_on(const std::string& backend) const {
  return std::find(backends.begin(), backends.end(), backend) != backends.end();
}

std::string stage_name(PolicyStage stage) {
  switch (stage) {
    case PolicyStage::Selector: return "selector";
    case PolicyStage::Correction: return "correction";
    case PolicyStage::Reuse: return "reuse";
    case PolicyStage::Traversal: return "traversal";
  }
  return "?";
}

const std::vector<PolicyInfo>& policy_registry() {
  static const std::vector<PolicyInfo> all = {
      dense_policy_info(), streaming_policy_info(), quest_policy_info(), oracle_policy_info(),
      gbsa_policy_info(),  resa_policy_info(),      cs_policy_info(),    rectify_policy_info(),
      retro_policy_info(), mac_policy_info(),       art_policy_info(),
  };
  return all;
}

const PolicyInfo* find_policy_info(const std::string& name) {
  for (const PolicyInfo& p : policy_registry())
    if (p.name == name) return &p;
  return nullptr;
}

std::string policy_names() {
  std::vector<std::string> names;
  for (const PolicyInfo& p : policy_registry()) names.push_back(p.name);
  return join(names);
}

}  // namespace skim
