// Policy strings: `name:key=value,...` joined by `+`, e.g. `quest:budget=0.1+art`,
// `resa:keep=0.1,f=32`, `streaming:sink=4,window=1024`. One parser serves the CLI, the server
// and the library; unknown names and keys are errors naming them.
#pragma once

#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace skim {

struct PolicyPart {
  std::string name;
  std::map<std::string, std::string> params;  // as written; typed access below

  bool has(const std::string& key) const { return params.count(key) > 0; }
  double number(const std::string& key, double fallback) const;
  int integer(const std::string& key, int fallback) const;
  std::string text(const std::string& key, const std::string& fallback) const;

  // read("window", m.window, "tau", m.tau, ...): each field (int or double, holding its
  // default) takes its key's value where the string sets it.
  void read() const {}
  template <class T, class... Rest>
  void read(const char* key, T& field, Rest&... rest) const {
    static_assert(std::is_same_v<T, int> || std::is_same_v<T, double>, "PolicyPart::read: int or double fields");
    if constexpr (std::is_same_v<T, int>)
      field = integer(key, field);
    else
      field = number(key, field);
    read(rest...);
  }
};

struct PolicySpec {
  std::string source;  // the string as given, for messages
  std::vector<PolicyPart> parts;

  const PolicyPart* find(const std::string& name) const;
  std::string canonical() const;  // parts and keys in a stable order
};

// Splits and checks the syntax; names, keys and each value's type and range are checked
// against the policy registry (policy_registry.h).
PolicySpec parse_policy_spec(const std::string& text);

// Splits a comma-separated list of policy strings (`--policy dense,quest:budget=0.1,min=0,resa`).
// Policy strings contain commas themselves, so an item that is a bare `key=value` continues
// the policy before it and any other item starts a new one. Empty items and a leading
// `key=value` are errors naming `flag`.
std::vector<std::string> split_policy_list(const std::string& text, const std::string& flag = "--policy");

}  // namespace skim
