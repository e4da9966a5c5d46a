// skim policies: every attention policy with its keys, defaults, ranges, stage, compositions
// and backends, read from the policy registry (human or --json).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "commands.h"
#include "skim/policy.h"

namespace skim::cli {

namespace {

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string s;
  for (const std::string& x : items) s += (s.empty() ? "" : sep) + x;
  return s;
}

const char* kind_name(PolicyKey::Kind k) {
  switch (k) {
    case PolicyKey::Kind::Number: return "number";
    case PolicyKey::Kind::Integer: return "integer";
    case PolicyKey::Kind::Choice: return "choice";
  }
  return "?";
}

nlohmann::ordered_json key_json(const PolicyKey& k) {
  nlohmann::ordered_json j = {{"name", k.name}, {"type", kind_name(k.kind)}, {"default", k.fallback},
                              {"range", k.range_text()}, {"help", k.help}};
  if (k.kind == PolicyKey::Kind::Choice) {
    j["choices"] = k.choices;
  } else {
    j["min"] = k.lo;
    j["min_exclusive"] = k.lo_open;
    if (k.hi < kNoUpperBound) {
      j["max"] = k.hi;
      j["max_exclusive"] = k.hi_open;
    }
  }
  return j;
}

nlohmann::ordered_json registry_json() {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const PolicyInfo& p : policy_registry()) {
    nlohmann::ordered_json keys = nlohmann::ordered_json::array();
    for (const PolicyKey& k : p.keys) keys.push_back(key_json(k));
    all.push_back({{"name", p.name},
                   {"summary", p.summary},
                   {"stage", stage_name(p.stage)},
                   {"keys", keys},
                   {"composes_with", p.composes_with},
                   {"requires_one_of", p.requires_one_of},
                   {"sequence_state", p.sequence_state},
                   {"order", p.order},
                   {"backends", p.backends}});
  }
  return all;
}

void print_text() {
  for (const PolicyInfo& p : policy_registry()) {
    std::printf("%s (%s; runs on %s)\n  %s\n", p.name.c_str(), stage_name(p.stage).c_str(),
                join(p.backends).c_str(), p.summary.c_str());
    for (const PolicyKey& k : p.keys)
      std::printf("  %-13s %-8s %-10s %s (%s)\n", k.name.c_str(), kind_name(k.kind), k.fallback.c_str(),
                  k.help.c_str(), k.range_text().c_str());
    if (!p.composes_with.empty()) std::printf("  with: %s\n", join(p.composes_with).c_str());
    if (!p.requires_one_of.empty()) std::printf("  needs one of: %s\n", join(p.requires_one_of).c_str());
    std::printf("\n");
  }
  std::printf("Compose with '+', set keys with ':' and ',': quest:budget=0.3+art (docs/policies.md).\n");
}

}  // namespace

void register_policies(CLI::App& root, std::function<void()>& run) {
  auto* cmd = root.add_subcommand("policies", "List the attention policies, their keys, defaults and ranges");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "machine-readable output");
  cmd->callback([&run, json] {
    run = [json] {
      if (*json) std::printf("%s\n", registry_json().dump(2).c_str());
      else print_text();
    };
  });
}

}  // namespace skim::cli
