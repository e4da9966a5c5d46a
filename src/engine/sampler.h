// Sampling helpers of the engine; SamplingParams and Sampler are public (skim/sampling.h).
#pragma once

#include <span>

#include "skim/sampling.h"

namespace skim {

int argmax(std::span<const float> logits);

}  // namespace skim
