// RetroAttention at the engine level (seeds/000 Algorithm 1): a decode step of a sequence runs
// its last w-1 tokens again, before the newest one, so every layer recomputes their q, k, v from
// corrected hidden states, overwrites their K/V and updates their attention outputs
// (src/attention/retro.h does the attention). Only the newest row's logits are used.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace skim {

struct RetroRows {
  std::vector<int32_t> tokens, positions, steps;  // oldest first
};

// The past rows of a decode step: the last min(w-1, steps) tokens of a sequence of `length`
// tokens, where `steps` decode steps ran under the current policy (prompt tokens are never
// past rows: they attended densely). Their steps count back from `steps - 1`.
inline RetroRows retro_past_rows(const std::vector<int>& tokens, int length, int steps, int w) {
  RetroRows r;
  const int k = std::max(0, std::min(w - 1, steps));
  for (int j = k; j >= 1; --j) {
    r.tokens.push_back(tokens[size_t(length - j)]);
    r.positions.push_back(length - j);
    r.steps.push_back(steps - j);
  }
  return r;
}

}  // namespace skim
