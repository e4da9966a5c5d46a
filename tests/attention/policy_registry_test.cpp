// The registry says what the parser, the factory and the docs do: these tests hold them to it.
#include "attention/policy_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "attention/policy.h"
#include "attention/policy_spec.h"
#include "core/error.h"

namespace skim {
namespace {

bool builds(const std::string& spec) {
  try {
    make_policy(spec);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string parse_error(const std::string& spec) {
  try {
    parse_policy_spec(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string fmt_number(double v) { return fmt::format("{}", v); }

bool requirement_met(const PolicyInfo& p, const std::set<std::string>& others) {
  if (p.requires_one_of.empty()) return true;
  for (const std::string& r : p.requires_one_of)
    if (others.count(r)) return true;
  return false;
}

// Every pair of parts builds exactly when each composes with the other and each one's
// requirement is met by the other; a part alone builds when it requires nothing.
TEST(PolicyRegistry, CompositionsAreWhatTheFactoryBuilds) {
  for (const PolicyInfo& a : policy_registry()) {
    EXPECT_EQ(builds(a.name), a.requires_one_of.empty()) << a.name;
    for (const PolicyInfo& b : policy_registry()) {
      if (a.name == b.name) continue;
      const bool want = a.composes(b.name) && b.composes(a.name) && requirement_met(a, {b.name}) &&
                        requirement_met(b, {a.name});
      EXPECT_EQ(builds(a.name + "+" + b.name), want) << a.name << "+" << b.name;
    }
  }
  EXPECT_TRUE(builds("quest+retro+rectify"));
}

TEST(PolicyRegistry, SequenceStateIsWhatThePolicyKeeps) {
  for (const PolicyInfo& p : policy_registry()) {
    if (p.stage == PolicyStage::Selector && p.requires_one_of.empty()) {
      EXPECT_EQ(make_policy(p.name)->keeps_sequence_state(), p.sequence_state) << p.name;
    }
  }
  EXPECT_EQ(make_policy("quest+retro")->keeps_sequence_state(), find_policy_info("retro")->sequence_state);
  EXPECT_EQ(make_policy("mac")->keeps_sequence_state(), find_policy_info("mac")->sequence_state);
  EXPECT_EQ(make_policy("art")->keeps_sequence_state(), find_policy_info("art")->sequence_state);
}

// Each key takes its default and the ends of its range, and refuses what lies past them, with
// a message naming the policy, the key and the range.
TEST(PolicyRegistry, KeysTakeTheirRangeAndRefuseBeyondIt) {
  for (const PolicyInfo& p : policy_registry())
    for (const PolicyKey& k : p.keys) {
      const std::string at = p.name + ":" + k.name + "=";
      EXPECT_EQ(parse_error(at + k.fallback), "") << at << k.fallback;
      if (k.kind == PolicyKey::Kind::Choice) {
        for (const std::string& c : k.choices) EXPECT_EQ(parse_error(at + c), "") << at << c;
        EXPECT_NE(parse_error(at + "nonsense").find("must be one of"), std::string::npos) << at;
        continue;
      }
      const double step = k.kind == PolicyKey::Kind::Integer ? 1 : 1e-3;
      if (!k.lo_open) {
        EXPECT_EQ(parse_error(at + fmt_number(k.lo)), "") << at << k.lo;
      }
      const std::string below = parse_error(at + fmt_number(k.lo - step));
      EXPECT_NE(below.find("out of range"), std::string::npos) << at << k.lo - step << ": " << below;
      EXPECT_NE(below.find(p.name + ":" + k.name), std::string::npos) << below;
      if (k.hi < kNoUpperBound) {
        if (!k.hi_open) {
          EXPECT_EQ(parse_error(at + fmt_number(k.hi)), "") << at << k.hi;
        }
        EXPECT_NE(parse_error(at + fmt_number(k.hi + step)).find("out of range"), std::string::npos) << at << k.hi;
      }
      if (k.kind == PolicyKey::Kind::Integer) {
        EXPECT_NE(parse_error(at + "1.5").find("not an integer"), std::string::npos) << at;
      }
    }
}

// docs/policies.md's key tables: every key of every policy, with the registry's default.
// Rows are `| `name` | `key` | default | meaning |`, continued by `| | `key` | ...`; a cell
// may list several keys and as many defaults, comma-separated.
std::map<std::string, std::map<std::string, std::string>> documented_keys() {
  std::ifstream in(std::filesystem::path(SKIM_SOURCE_DIR) / "docs/policies.md");
  EXPECT_TRUE(in) << "docs/policies.md";
  auto strip = [](std::string s) {
    std::string out;
    for (char c : s)
      if (c != '`') out += c;
    const size_t b = out.find_first_not_of(' '), e = out.find_last_not_of(' ');
    return b == std::string::npos ? std::string() : out.substr(b, e - b + 1);
  };
  auto split = [&](const std::string& s) {
    std::vector<std::string> parts;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) parts.push_back(strip(item));
    return parts;
  };
  std::map<std::string, std::map<std::string, std::string>> keys;
  std::string line, policy;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(cell);
    if (cells.size() < 4) continue;
    const std::string name = strip(cells[0]);
    if (!name.empty()) policy = find_policy_info(name) ? name : "";
    if (policy.empty()) continue;
    const std::vector<std::string> ks = split(cells[1]), ds = split(cells[2]);
    if (ks.size() != ds.size()) continue;
    for (size_t i = 0; i < ks.size(); ++i)
      if (!ks[i].empty()) keys[policy][ks[i]] = ds[i];
  }
  return keys;
}

// The public check (skim/policy.h) refuses what the factory refuses and builds nothing.
TEST(PolicyRegistry, PublicCheckRefusesBadStrings) {
  EXPECT_NO_THROW(check_policy_spec("quest:budget=0.2+art"));
  EXPECT_NO_THROW(check_policy_spec("resa"));
  EXPECT_THROW(check_policy_spec("quest:budget=2x"), Error);
  EXPECT_THROW(check_policy_spec("nosuch"), Error);
  EXPECT_THROW(check_policy_spec("mac+retro"), Error);
}

TEST(PolicyRegistry, DocsListEveryKeyWithItsDefault) {
  auto docs = documented_keys();
  for (const PolicyInfo& p : policy_registry())
    for (const PolicyKey& k : p.keys) {
      auto it = docs[p.name].find(k.name);
      ASSERT_NE(it, docs[p.name].end()) << "docs/policies.md has no row for " << p.name << ":" << k.name;
      if (k.kind == PolicyKey::Kind::Choice) {
        EXPECT_EQ(it->second, k.fallback) << p.name << ":" << k.name;
      } else {
        EXPECT_DOUBLE_EQ(std::stod(it->second), std::stod(k.fallback)) << p.name << ":" << k.name;
      }
    }
  for (auto& [policy, keys] : docs)
    for (auto& [key, value] : keys)
      EXPECT_NE(find_policy_info(policy)->key(key), nullptr) << "docs/policies.md documents " << policy << ":" << key
                                                             << ", which the registry does not have";
}

}  // namespace
}  // namespace skim
