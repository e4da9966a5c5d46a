#include "attention/policy_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "attention/policy_registry.h"
#include "core/error.h"

namespace skim {

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(trim(item));
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

}  // namespace

double PolicyPart::number(const std::string& key, double fallback) const {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  double v = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  SKIM_REQUIRE(ec == std::errc() && end == it->second.data() + it->second.size() && std::isfinite(v),
               "policy: {}:{}={} is not a finite number", name, key, it->second);
  return v;
}

int PolicyPart::integer(const std::string& key, int fallback) const {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  int v = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  SKIM_REQUIRE(ec == std::errc() && end == it->second.data() + it->second.size(),
               "policy: {}:{}={} is not an integer", name, key, it->second);
  return v;
}

std::string PolicyPart::text(const std::string& key, const std::string& fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : it->second;
}

const PolicyPart* PolicySpec::find(const std::string& name) const {
  for (const PolicyPart& p : parts)
    if (p.name == name) return &p;
  return nullptr;
}

std::string PolicySpec::canonical() const {
  std::string s;
  for (const PolicyPart& p : parts) {
    if (!s.empty()) s += "+";
    s += p.name;
    char sep = ':';
    for (auto& [k, v] : p.params) {
      s += sep + k + "=" + v;
      sep = ',';
    }
  }
  return s;
}

std::vector<std::string> split_policy_list(const std::string& text, const std::string& flag) {
  std::vector<std::string> policies;
  for (const std::string& item : split(text, ',')) {
    SKIM_REQUIRE(!item.empty(), "{} '{}': empty item in the list", flag, text);
    // `key=value` with a bare key (no ':' or '+' before the '=') continues the last policy.
    size_t eq = item.find('=');
    bool continues = eq != std::string::npos && item.find_first_of(":+") > eq;
    if (continues) {
      SKIM_REQUIRE(!policies.empty(), "{} '{}': '{}' comes before any policy name", flag, text, item);
      policies.back() += "," + item;
    } else {
      policies.push_back(item);
    }
  }
  SKIM_REQUIRE(!policies.empty(), "{}: empty policy list", flag);
  return policies;
}

PolicySpec parse_policy_spec(const std::string& text) {
  PolicySpec spec;
  spec.source = text;
  SKIM_REQUIRE(!trim(text).empty(), "policy: empty policy (available: {})", policy_names());
  for (const std::string& item : split(text, '+')) {
    SKIM_REQUIRE(!item.empty(), "policy '{}': empty part between '+'", text);
    PolicyPart part;
    size_t colon = item.find(':');
    part.name = trim(item.substr(0, colon));
    const PolicyInfo* info = find_policy_info(part.name);
    SKIM_REQUIRE(info, "policy '{}': unknown policy '{}' (available: {})", text, part.name, policy_names());
    SKIM_REQUIRE(!spec.find(part.name), "policy '{}': '{}' appears twice", text, part.name);
    if (colon != std::string::npos) {
      for (const std::string& kv : split(item.substr(colon + 1), ',')) {
        size_t eq = kv.find('=');
        SKIM_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < kv.size(),
                     "policy '{}': '{}' is not key=value", text, kv);
        std::string key = trim(kv.substr(0, eq)), value = trim(kv.substr(eq + 1));
        const PolicyKey* k = info->key(key);
        if (!k) {
          std::string allowed;
          for (const PolicyKey& x : info->keys) allowed += (allowed.empty() ? "" : ", ") + x.name;
          fail("policy '{}': '{}' has no parameter '{}' (it takes: {})", text, part.name, key,
               allowed.empty() ? "none" : allowed);
        }
        SKIM_REQUIRE(!part.has(key), "policy '{}': {}:{} given twice", text, part.name, key);
        k->check(part.name, value);  // type and range, from the registry
        part.params[key] = value;
      }
    }
    spec.parts.push_back(std::move(part));
  }
  return spec;
}

}  // namespace skim
