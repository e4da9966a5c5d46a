// One draw of a device sampler (backend/cuda/sample.cu): a logits row's sampling settings and
// the draw's index in its sequence. The generator is counter-based, so (seed, step) alone give
// the random number: a CUDA graph replays the draw with new inputs, no state on the device.
#pragma once

#include <cstdint>

namespace skim {

struct SampleParams {
  float temperature = 0.0f;
  int top_k = 0;        // 0: no cut
  float top_p = 1.0f;   // 1: no cut
  uint64_t seed = 0;
  uint64_t step = 0;    // the draw's index in its sequence: a new number every step
};

}  // namespace skim
