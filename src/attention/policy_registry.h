// The policy registry's internals (the public part is include/skim/policy.h): what every
// attention policy is, in data. Each method declares its entry
// in its own file (its name, keys with defaults and ranges, stage, what it composes with,
// whether it keeps per-sequence state, its traversal order, the backends it runs on); the
// parser checks names, keys and values against it, and `skim policies`, the docs test and the
// server read it. The defaults come from the methods' parameter structs, so they exist once.
#pragma once

#include <string>
#include <vector>

#include "skim/policy.h"  // PolicyInfo, PolicyKey, PolicyStage, the registry's lookups

namespace skim {

// Key builders: the default is the parameter struct's value, formatted as a policy string writes it.
PolicyKey number_key(std::string name, double fallback, double lo, double hi, std::string help);
PolicyKey fraction_key(std::string name, double fallback, std::string help);  // in (0, 1]
PolicyKey positive_key(std::string name, double fallback, std::string help);  // > 0
PolicyKey unit_key(std::string name, double fallback, std::string help);      // in [0, 1)
PolicyKey integer_key(std::string name, int fallback, int lo, int hi, std::string help);
PolicyKey choice_key(std::string name, std::string fallback, std::vector<std::string> choices, std::string help);

// Each method's entry, defined beside the method.
PolicyInfo dense_policy_info();
PolicyInfo streaming_policy_info();
PolicyInfo quest_policy_info();
PolicyInfo oracle_policy_info();
PolicyInfo gbsa_policy_info();
PolicyInfo resa_policy_info();
PolicyInfo rectify_policy_info();
PolicyInfo cs_policy_info();
PolicyInfo retro_policy_info();
PolicyInfo mac_policy_info();
PolicyInfo art_policy_info();

}  // namespace skim
