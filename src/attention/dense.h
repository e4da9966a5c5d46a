// Dense attention: every row attends to all keys of its sequence up to its own position.
// The reference every other policy is compared with.
#pragma once

#include "attention/policy.h"

namespace skim {

class DensePolicy : public AttentionPolicy {
 public:
  std::string name() const override { return "dense"; }
  void attend(const AttentionBatch& batch) override;
};

}  // namespace skim
