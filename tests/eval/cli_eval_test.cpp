// `skim eval` as a user meets it: bad flags give one line naming the flag and exit status 2.
// Runs the built binary; skipped when it has not been built in this build tree.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../real_model.h"

namespace {

const std::filesystem::path kSkim = std::filesystem::path(SKIM_BINARY_DIR) / "skim";

std::pair<int, std::string> run(const std::string& args) {
  std::string cmd = kSkim.string() + " eval " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

TEST(EvalCommand, BadFlagsNameTheFlag) {
  if (!std::filesystem::exists(kSkim)) GTEST_SKIP() << kSkim << " not built";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--tasks ppl,foo", "--tasks: unknown task 'foo'"},
      {"--lengths 4096,abc", "--lengths"},
      {"--data /nonexistent/skim", "--data: '/nonexistent/skim' does not exist"},
      {"--ctx 4096 --lengths 8192", "--lengths: 8192 is over --ctx 4096"},
      {"--policy dense,,quest", "empty item"},
      {"--policy budget=0.1,quest", "comes before any policy name"},
      {"--tasks agree --plot /tmp/x.png", "--plot"},
      {"--buckets 0 --tasks ppl", "--buckets"},
      {"--tasks needle --needles number,colour", "--needles: unknown kind 'colour'"},
      {"--tasks needle --lengths 4096", "chat template"},  // the demo model has none
  };
  for (const auto& [args, message] : cases) {
    auto [status, out] = run(args);
    EXPECT_EQ(status, 2) << args << "\n" << out;
    EXPECT_NE(out.find(message), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << out;
  }
}

// The needle task end to end on the real model, through its own chat template: dense finds a
// number hidden in 600 tokens of code.
TEST(EvalCommand, NeedleTaskRunsThroughTheChatTemplate) {
  if (!std::filesystem::exists(kSkim)) GTEST_SKIP() << kSkim << " not built";
  SKIM_REQUIRE_SMOLLM2();
  auto [status, out] = run("-m " + skim::test::smollm2_dir().string() +
                           " --tasks needle --needles number --policy dense --ctx 640 --lengths 640 --prompts 1"
                           " --depths 0.5 --json");
  ASSERT_EQ(status, 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  const auto& cell = j["policies"][0]["needle"]["number"]["640"];
  EXPECT_EQ(cell["total"], 1) << out;
  EXPECT_EQ(cell["correct"], 1) << out;  // measured: the answer is the number
}

}  // namespace
