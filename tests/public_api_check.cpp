// Compiled with include/ as the only include directory and no libraries linked: the public API
// (include/skim/) stands on its own, with no src/ header behind it. A build check, not a test.
#include "skim/engine.h"
#include "skim/policy.h"
#include "skim/sampling.h"
#include "skim/stats.h"

namespace {
[[maybe_unused]] skim::GenerationRequest request;
[[maybe_unused]] skim::EngineOptions options;
[[maybe_unused]] skim::PolicyStats stats;
[[maybe_unused]] skim::PolicyInfo info;
}  // namespace
