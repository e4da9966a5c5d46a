#include "cli_common.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "attention/policy_registry.h"
#include "attention/policy_spec.h"
#include "attention/selectors.h"
#include "engine/field_checks.h"

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

ProgressCallback prefill_progress(const std::string& label) {
  if (isatty(fileno(stderr)))
    return [label](int done, int total) {
      if (total < 2048) return;  // short prefills finish before a bar is worth drawing
      const int width = 30;
      int filled = int(double(done) / total * width);
      std::fprintf(stderr, "\r%s [%s%s] %d/%d", label.c_str(), std::string(size_t(filled), '#').c_str(),
                   std::string(size_t(width - filled), ' ').c_str(), done, total);
      if (done == total) std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    };
  using Clock = std::chrono::steady_clock;
  auto start = std::make_shared<Clock::time_point>(Clock::now());
  auto last = std::make_shared<Clock::time_point>(Clock::now());
  const double interval = progress_interval_seconds();
  return [label, start, last, interval](int done, int total) {
    const auto now = Clock::now();
    if (done >= total || std::chrono::duration<double>(now - *last).count() < interval) return;
    *last = now;
    const double secs = std::chrono::duration<double>(now - *start).count();
    const double rate = secs > 0 ? done / secs : 0;
    std::fprintf(stderr, "%s: %d/%d tokens (%.0f%%), %.0f tok/s, ETA %.0f s\n", label.c_str(), done, total,
                 100.0 * done / std::max(1, total), rate, rate > 0 ? (total - done) / rate : 0.0);
    std::fflush(stderr);
  };
}

double progress_interval_seconds() {
  if (const char* v = std::getenv("SKIM_PROGRESS_INTERVAL")) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end != v && *end == '\0' && s >= 0 && s <= 3600) return s;
  }
  return kLogProgressSeconds;
}

void require_writable_file(const std::filesystem::path& path, const std::string& flag) {
  namespace fs = std::filesystem;
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  SKIM_REQUIRE(fs::is_directory(dir), "{}: the folder '{}' does not exist", flag, dir.string());
  SKIM_REQUIRE(access(dir.c_str(), W_OK) == 0, "{}: the folder '{}' is not writable", flag, dir.string());
  SKIM_REQUIRE(!fs::is_directory(path), "{}: '{}' is a folder", flag, path.string());
}

void add_engine_flags(CLI::App& app, EngineOptions& o) {
  app.add_option("-m,--model", o.model_dir, "Hugging Face model directory (default: the demo model)");
  app.add_option("-c,--ctx,--ctx-size", o.max_context, "context limit per sequence, tokens")->capture_default_str();
  app.add_option("-t,--threads", o.threads, fmt::format("CPU threads (0: all cores; at most {})", max_threads()))
      ->capture_default_str();
  app.add_option("--policy", o.policy, "attention policy, e.g. dense")->capture_default_str();
  app.add_option("--chunk", o.prefill_chunk, "prefill chunk, tokens (0: 512 on the CPU, 2048 on the GPU)")->capture_default_str();
  app.add_option("--device", o.device, "cpu, or cuda (every policy but cs and oracle; skim policies lists each one's backends)")->capture_default_str();
  app.add_option("--tp", o.tensor_parallel,
                 "tensor parallelism: ranks to split the model's heads, MLP and vocabulary over (CPU: one thread "
                 "each, sharing --threads)")
      ->capture_default_str();
  CLI::Option* slots = add_host_kv_slots_flag(app, o.host_kv_slots,
                         "GPU: keep the KV cache in pinned host memory, each decode step's selected pages read "
                         "through a device cache of N pages per layer and KV head (auto: as many as the GPU's free "
                         "memory holds, less a reserve; 0: the KV cache on the GPU)")
      ->capture_default_str();
  add_host_kv_prefetch_flags(app, o.host_kv_prefetch, slots);
  app.add_flag_callback(
      "--no-dense-fallback", [&o] { o.dense_fallback = false; },
      "GPU: sparse policies select at every decode step, even where attending every key is faster (the default "
      "falls back to dense there: short contexts at small batches)");
}

std::string flag_of_field(const std::string& field) {
  static const std::map<std::string, std::string> flags = {
      {"max_context", "--ctx"},       {"max_sequences", "--parallel"}, {"prefill_chunk", "--chunk"},
      {"threads", "--threads"},       {"device", "--device"},          {"max_tokens", "--max-tokens"},
      {"temperature", "--temperature"}, {"top_k", "--top-k"},         {"top_p", "--top-p"},
      {"seed", "--seed"},             {"logprobs", "--logprobs"},      {"stop", "--stop"},
      {"tensor_parallel", "--tp"},    {"host_kv_slots", "--host-kv-slots"}};
  auto it = flags.find(field);
  return it != flags.end() ? it->second : field;
}

void add_seed_flag(CLI::App& app, uint64_t& seed, const std::string& help) {
  auto value = std::make_shared<int64_t>(int64_t(seed));
  app.add_option_function<int64_t>(
         "--seed", [&seed, value](const int64_t& v) { seed = uint64_t(check_int(fields::kSeed, v)); }, help)
      ->default_str(std::to_string(seed));
}

std::string host_kv_dense_note(const EngineOptions& o) {
  if (o.host_kv_slots == 0) return "";
  PolicySpec spec;
  try {
    spec = parse_policy_spec(o.policy);
  } catch (const Error&) {
    return "";  // the engine names what is wrong
  }
  const char* tail = "; KV beyond GPU memory is read at PCIe speed (about 50 GB/s)";
  const PolicyPart* selector = nullptr;  // the registry's selector stage (dense when none is named)
  for (const PolicyPart& p : spec.parts)
    if (find_policy_info(p.name)->stage == PolicyStage::Selector) selector = &p;
  if (!selector || selector->name == "dense")
    return fmt::format("note: --policy {} attends every key, and with --host-kv-slots reads each over PCIe every "
                       "step{} (a page selector, e.g. quest or gbsa, reads only its pages)",
                       o.policy, tail);
  const int dense_layers = selector->integer("dense_layers", selector->name == "quest" ? kQuestDenseLayers : 0);
  if (dense_layers > 0)
    return fmt::format("note: {}'s first {} layers (dense_layers) attend every key, and with --host-kv-slots read "
                       "each over PCIe every step{} ({}:dense_layers=0 selects in every layer)",
                       selector->name, dense_layers, tail, selector->name);
  return "";
}

void add_host_kv_prefetch_flags(CLI::App& app, bool& prefetch, CLI::Option* slots) {
  CLI::Option* on = app.add_flag_callback(
                           "--host-kv-prefetch", [&prefetch] { prefetch = true; },
                           "with --host-kv-slots (the default there): copy each layer's pages ahead while the "
                           "layer before runs, selected by a query guessed from its input (outputs unchanged; "
                           "more bytes cross PCIe where the guess is wrong)")
                        ->needs(slots);
  app.add_flag_callback(
         "--no-host-kv-prefetch", [&prefetch] { prefetch = false; },
         "with --host-kv-slots: copy only what each layer's own selection misses, when it needs it")
      ->excludes(on)
      ->needs(slots);
}

CLI::Option* add_host_kv_slots_flag(CLI::App& app, int& slots, const std::string& help) {
  return app.add_option("--host-kv-slots", slots, help)
      ->transform(CLI::Transformer(std::map<std::string, int>{{"auto", kHostKvSlotsAuto}}));
}

}  // namespace skim::cli
