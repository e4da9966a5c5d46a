#include "attention/dense.h"
#include "core/error.h"

namespace skim {

std::unique_ptr<AttentionPolicy> make_policy(const std::string& spec) {
  if (spec == "dense") return std::make_unique<DensePolicy>();
  fail("--policy: unknown policy '{}' (available: dense)", spec);
}

}  // namespace skim
