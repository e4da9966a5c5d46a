#include "cli_common.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace skim::cli {

std::filesystem::path default_model_dir() {
  namespace fs = std::filesystem;
  const fs::path rel = "models/demo-code-28m";
  std::vector<fs::path> roots = {fs::current_path()};
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    roots.push_back(exe.parent_path());
    roots.push_back(exe.parent_path().parent_path());
  }
#ifdef SKIM_SOURCE_DIR
  roots.push_back(SKIM_SOURCE_DIR);
#endif
  for (const fs::path& r : roots)
    if (fs::exists(r / rel / "config.json")) return r / rel;
  fail("--model not given and the demo model ({}) was not found; pass --model DIR", rel.string());
}

std::string read_text_file(const std::filesystem::path& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  SKIM_REQUIRE(in.good(), "{}: cannot open '{}'", flag, path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ProgressCallback terminal_progress(const std::string& label) {
  if (!isatty(fileno(stderr))) return {};
  return [label](int done, int total) {
    if (total < 2048) return;  // short prefills finish before a bar is worth drawing
    const int width = 30;
    int filled = int(double(done) / total * width);
    std::fprintf(stderr, "\r%s [%s%s] %d/%d", label.c_str(), std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), ' ').c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  };
}

void add_engine_flags(CLI::App& app, EngineOptions& o) {
  app.add_option("-m,--model", o.model_dir, "Hugging Face model directory (default: the demo model)");
  app.add_option("--ctx", o.max_context, "context limit per sequence, tokens")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "CPU threads (0: all cores)")->capture_default_str();
  app.add_option("--policy", o.policy, "attention policy, e.g. dense")->capture_default_str();
  app.add_option("--chunk", o.prefill_chunk, "prefill chunk, tokens")->capture_default_str();
  app.add_option("--device", o.device, "cpu, or cuda (policies dense, gbsa and resa so far)")->capture_default_str();
}

}  // namespace skim::cli
