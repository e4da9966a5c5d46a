// One golden case of tests/fixtures/golden/<name>/ (format: tests/fixtures/golden/README.md):
// golden.json's metadata and golden.safetensors' F32 tensors, for the golden tests of the demo
// model, the tiny checkpoints and SmolLM2.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/safetensors.h"

namespace skim::test {

struct GoldenCase {
  nlohmann::json meta;
  std::unique_ptr<SafetensorsFile> tensors;
  template <class T = float>
  const T* rows(const char* name) const {
    return static_cast<const T*>(tensors->tensors().at(name).data);
  }
};

inline GoldenCase load_golden_case(const std::string& name) {
  const auto dir = std::filesystem::path(SKIM_SOURCE_DIR) / "tests/fixtures/golden" / name;
  std::ifstream in(dir / "golden.json");
  GoldenCase c;
  c.meta = nlohmann::json::parse(in);
  c.tensors = std::make_unique<SafetensorsFile>(dir / "golden.safetensors");
  return c;
}

}  // namespace skim::test
