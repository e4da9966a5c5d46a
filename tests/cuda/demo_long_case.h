// The 4K demo prompt teacher-forced (tests/fixtures/golden/demo-long): the prompt but its last
// token as the prefix, then token(i) at decode step i (the prompt's last token, then
// transformers' greedy continuation), so that every engine decodes the same tokens.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace skim::test {

struct DemoLong {
  std::vector<int> prompt, forced, prefix;
  DemoLong() {
    std::ifstream in(std::filesystem::path(SKIM_SOURCE_DIR) / "tests/fixtures/golden/demo-long/golden.json");
    const nlohmann::json meta = nlohmann::json::parse(in);
    prompt = meta["prompt_ids"].get<std::vector<int>>();
    forced = meta["greedy_ids"].get<std::vector<int>>();
    prefix.assign(prompt.begin(), prompt.end() - 1);
  }
  int token(int i) const { return i == 0 ? prompt.back() : forced[size_t(i - 1)]; }
};

}  // namespace skim::test
