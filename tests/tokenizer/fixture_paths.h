// Where the tokenizer tests find their files, and small helpers they share.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace skim::test {

inline std::filesystem::path repo_path(const std::string& relative) {
  return std::filesystem::path(SKIM_SOURCE_DIR) / relative;
}

inline std::filesystem::path tokenizer_fixture(const std::string& name) {
  return repo_path("tests/fixtures/tokenizer/" + name);
}

inline std::filesystem::path demo_tokenizer_path() { return repo_path("models/demo-code-28m/tokenizer.json"); }

inline std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace skim::test
