// `skim eval` as a user meets it: bad flags give one line naming the flag and exit status 2.
// Runs the built binary; skipped when it has not been built in this build tree.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

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
  };
  for (const auto& [args, message] : cases) {
    auto [status, out] = run(args);
    EXPECT_EQ(status, 2) << args << "\n" << out;
    EXPECT_NE(out.find(message), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << out;
  }
}

}  // namespace
