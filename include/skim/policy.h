// Attention policies in skim's public API: the registry of every policy (name, keys with their
// defaults and ranges, stage, compositions, per-sequence state, traversal order, backends),
// and the check of a policy string. Policy strings are `name:key=value,...` joined by `+`
// (docs/policies.md); `skim policies [--json]` prints this registry.
#pragma once

#include <string>
#include <vector>

namespace skim {

enum class PolicyStage {
  Selector,    // chooses the keys a decode row reads (at most one per policy)
  Correction,  // the engine re-runs tokens (rectify) or past rows (retro)
  Reuse,       // serves part of the attention from cached states (mac)
  Traversal,   // visits the chosen keys in an order and may stop early (art)
};

// An upper bound that means "none worth naming": ranges print as ">= lo" above it.
constexpr int kNoUpperBound = 1000000000;

struct PolicyKey {
  enum class Kind { Number, Integer, Choice };
  std::string name;
  Kind kind = Kind::Number;
  std::string fallback;  // the default, written as in a policy string
  double lo = 0, hi = 0;   // Number, Integer: the range, inclusive unless lo_open
  bool lo_open = false, hi_open = false;  // (lo, ...  ..., hi)
  std::vector<std::string> choices;  // Choice
  std::string help;

  // Throws a user error naming `policy`:`name`=value when the value is malformed or out of range.
  void check(const std::string& policy, const std::string& value) const;
  std::string range_text() const;  // e.g. "> 0", "in (0, 1]", ">= 1", "one of head, group"
};

struct PolicyInfo {
  std::string name{};
  std::string summary{};
  PolicyStage stage = PolicyStage::Selector;
  std::vector<PolicyKey> keys{};
  // The parts it may be written with (`quest+art`): a relation the factory enforces with the
  // reason when refused; tests hold the two in agreement.
  std::vector<std::string> composes_with{};
  // Needs one of these parts beside it (rectify: a sparse selector; retro: a page selector).
  std::vector<std::string> requires_one_of{};
  bool sequence_state = false;  // keeps per-sequence state beyond the KV cache
  std::string order{};           // the order it reads keys in, for a traversal that follows it
  std::vector<std::string> backends = {"cpu"};

  const PolicyKey* key(const std::string& name) const;
  bool composes(const std::string& other) const;
  bool runs_on(const std::string& backend) const;
};

std::string stage_name(PolicyStage stage);

// Every policy, in the order `skim policies` and docs/policies.md list them.
const std::vector<PolicyInfo>& policy_registry();
// Null when there is no such policy.
const PolicyInfo* find_policy_info(const std::string& name);
// "dense, streaming, quest, ...": for messages.
std::string policy_names();

// Throws skim::Error with a message naming the part, key or value when `spec` is not a valid
// policy string (an unknown name or key, a value out of range, a composition that makes no
// sense). Builds nothing.
void check_policy_spec(const std::string& spec);

}  // namespace skim
