#include "model/model.h"

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace skim {

std::unique_ptr<Model> load_model(const std::filesystem::path& dir) {
  SKIM_REQUIRE(std::filesystem::is_directory(dir), "--model: '{}' is not a directory", dir.string());
  auto m = std::make_unique<Model>();
  m->dir = dir;
  m->config = load_model_config(dir);
  m->weights = load_weights(dir, m->config);
  m->rope_inv_freq.resize(size_t(m->config.head_dim / 2));
  rope_inv_freq(m->config.rope, m->config.head_dim, m->rope_inv_freq.data());
  return m;
}

}  // namespace skim
