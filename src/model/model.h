// A loaded model: its config and weights. Immutable once loaded; shared by engines.
#pragma once

#include <filesystem>
#include <memory>

#include "model/config.h"
#include "model/weights.h"

namespace skim {

struct Model {
  std::filesystem::path dir;
  ModelConfig config;
  ModelWeights weights;
  std::vector<float> rope_inv_freq;  // [head_dim / 2]
};

// Loads config.json and the safetensors weights of a Hugging Face model directory.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir);

}  // namespace skim
