// The `skim` command as a user meets it: bad input gives one clear line and exit status 2,
// never a crash; good input generates.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_common.h"

namespace {

namespace fs = std::filesystem;
const fs::path kRoot = SKIM_SOURCE_DIR;
const fs::path kSkim = fs::path(SKIM_BINARY_DIR) / "skim";
const fs::path kDemo = kRoot / "models/demo-code-28m";

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr together
};

Result run(const std::string& args) {
  std::string cmd = kSkim.string() + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

void expect_user_error(const std::string& args, const std::string& must_mention) {
  Result r = run(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(must_mention), std::string::npos) << args << "\n" << r.output;
}

// A copy of the demo model with one file replaced, in a fresh temporary directory.
fs::path demo_copy_with(const std::string& file, const std::string& content) {
  fs::path dir = fs::temp_directory_path() / ("skim-cli-" + std::to_string(::getpid()) + "-" + file);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (auto& e : fs::directory_iterator(kDemo)) fs::copy(e.path(), dir / e.path().filename());
  std::ofstream(dir / file, std::ios::binary | std::ios::trunc) << content;
  return dir;
}

TEST(Cli, GeneratesFromTheDemoModel) {
  Result r = run("generate -p 'def add(a, b):' -n 8 --ignore-eos --json");
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["generated_tokens"], 8);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_GT(j["prompt_tokens"].get<int>(), 3);
  EXPECT_GT(j["kv_bytes_per_step"].get<double>(), 0);
  EXPECT_TRUE(j["counters"].is_object());
  // A policy's counters come with the output: ART's visited fraction over its decode steps.
  Result art = run("generate -p 'def add(a, b):' -n 4 --ignore-eos --json --policy art");
  ASSERT_EQ(art.status, 0) << art.output;
  auto ja = nlohmann::json::parse(art.output.substr(art.output.find('{')));
  const double visited = ja["counters"]["art_visited_fraction"].get<double>();
  EXPECT_GT(visited, 0);
  EXPECT_LE(visited, 1);
}

// skim policies lists the registry: every policy, its keys with defaults and ranges.
TEST(Cli, PoliciesListsTheRegistry) {
  Result r = run("policies --json");
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  std::set<std::string> names;
  for (auto& p : j) names.insert(p["name"].get<std::string>());
  for (const char* n : {"dense", "quest", "gbsa", "resa", "cs", "retro", "mac", "art"}) EXPECT_TRUE(names.count(n)) << n;
  for (auto& p : j)
    if (p["name"] == "quest") {
      EXPECT_EQ(p["stage"], "selector");
      EXPECT_EQ(p["keys"][0]["name"], "budget");
      EXPECT_EQ(p["keys"][0]["range"], "> 0");
    }
  Result text = run("policies");
  EXPECT_EQ(text.status, 0);
  EXPECT_NE(text.output.find("cs (selector; runs on cpu, cuda)"), std::string::npos) << text.output;
}

// --chat with --chat-template: the prompt goes through the given template (the demo model has
// none); a template that raises is a user error naming the file and line.
TEST(Cli, ChatWithATemplateFile) {
  const fs::path dir = fs::temp_directory_path() / ("skim-cli-chat-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ok.jinja") << "{% for m in messages %}# {{ m.role }}: {{ m.content }}\n{% endfor %}";
  std::ofstream(dir / "bad.jinja") << "\n{{ raise_exception('no ' ~ messages[0].role ~ ' here') }}";
  Result r = run("generate -p 'x = 1' -n 2 --ignore-eos --json --chat --chat-template " + (dir / "ok.jinja").string());
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_GT(j["prompt_tokens"].get<int>(), 5);
  expect_user_error("generate -p x --chat --chat-template " + (dir / "bad.jinja").string(), "bad.jinja:2: raise_exception: no user here");
  expect_user_error("generate -p x --chat-template " + (dir / "ok.jinja").string(), "--chat-template needs --chat");
  fs::remove_all(dir);
}

TEST(Cli, BadFlags) {
  expect_user_error("generate --bogus 1 -p x", "--bogus");
  expect_user_error("", "subcommand");
  expect_user_error("generate -p x -n notanumber", "--max-tokens");
  expect_user_error("generate", "--prompt");
  expect_user_error("generate -p x --policy qest", "unknown policy 'qest'");
  expect_user_error("generate -p x --policy quest:budgett=1", "budgett");
  expect_user_error("generate -p x --top-p 0", "--top-p");
  expect_user_error("generate -f /nonexistent/prompt.txt", "/nonexistent/prompt.txt");
  expect_user_error("generate -p x --logprobs 2", "--json");
  expect_user_error("generate -p x --chat", "chat template");
}

TEST(Cli, BadModels) {
  expect_user_error("generate -p x -m /nonexistent/model", "/nonexistent/model");
  expect_user_error("generate -p x -m " + demo_copy_with("config.json", "{ not json").string(),
                    "config.json");
  std::string cfg;
  {
    std::ifstream in(kDemo / "config.json");
    cfg.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string gpt = cfg;
  gpt.replace(gpt.find("\"llama\""), 7, "\"gpt_neox\"");
  expect_user_error("generate -p x -m " + demo_copy_with("config.json", gpt).string(), "gpt_neox");
  expect_user_error("generate -p x -m " + demo_copy_with("model-00002-of-00004.safetensors", "short").string(),
                    "model-00002-of-00004.safetensors");
}

TEST(Cli, BadDeviceFlags) {
  expect_user_error("generate -p x --device tpu", "--device");
  // Built with CUDA: sparse policies are CPU-only; without: the build has no GPU path.
  expect_user_error("generate -p x --device cuda --policy quest", "--device cuda");
  // KV beyond GPU memory: a GPU's option (auto too), and a count of slots or auto.
  expect_user_error("generate -p x --host-kv-slots 64", "--host-kv-slots");
  expect_user_error("generate -p x --host-kv-slots auto", "--host-kv-slots");
  expect_user_error("generate -p x --device cuda --host-kv-slots -2", "--host-kv-slots");
  expect_user_error("generate -p x --device cuda --host-kv-slots many", "--host-kv-slots");
  // Copies ahead of KV beyond GPU memory: only with it.
  expect_user_error("generate -p x --device cuda --host-kv-prefetch", "--host-kv-prefetch");
  expect_user_error("bench --host-kv-prefetch", "--host-kv-prefetch");
  expect_user_error("generate -p x --device cuda --no-host-kv-prefetch", "--no-host-kv-prefetch");
  expect_user_error("bench --no-host-kv-prefetch", "--no-host-kv-prefetch");
}

// KV beyond GPU memory: the layers of a policy that attend every key read it over PCIe each
// step, and generate and serve say so (on the GPU, once the engine is up).
TEST(Cli, HostKvNotesTheLayersThatReadEveryKeyOverPcie) {
  skim::EngineOptions o;
  o.policy = "dense";
  EXPECT_EQ(skim::cli::host_kv_dense_note(o), "") << "no host KV, no note";
  o.host_kv_slots = 64;
  EXPECT_NE(skim::cli::host_kv_dense_note(o).find("--policy dense attends every key"), std::string::npos);
  o.policy = "art:order=group";
  EXPECT_NE(skim::cli::host_kv_dense_note(o).find("attends every key"), std::string::npos);
  o.policy = "quest:budget=0.05";  // its first 2 layers dense by default
  EXPECT_NE(skim::cli::host_kv_dense_note(o).find("quest's first 2 layers"), std::string::npos);
  o.policy = "gbsa:keep=0.05,dense_layers=3";
  EXPECT_NE(skim::cli::host_kv_dense_note(o).find("gbsa's first 3 layers"), std::string::npos);
  for (const char* quiet : {"quest:budget=0.05,dense_layers=0", "gbsa:keep=0.05", "streaming", "cs:keep=0.05",
                            "gbsa:keep=0.1+art:stop=group", "not-a-policy"})
    EXPECT_EQ(skim::cli::host_kv_dense_note((o.policy = quiet, o)), "") << quiet;
}

TEST(Cli, ServeRefusesBadFlagsAndAddresses) {
  expect_user_error("serve --port 70000", "--port");
  expect_user_error("serve --policy qest --port 0", "unknown policy 'qest'");
  expect_user_error("serve -m /nonexistent/model --port 0", "/nonexistent/model");
  expect_user_error("serve --host 203.0.113.1 --port 8089", "--host");  // not an address of this machine
}

// Flags past what the machine or the library can take: exit 2 naming the flag and the limit,
// never a crash, libgomp's failure or std::bad_alloc.
// --tp splits the model over ranks (threads on the CPU): the same greedy text as one rank.
TEST(Cli, TensorParallelGeneratesAsOneRank) {
  std::string text[2];
  for (int i = 0; i < 2; ++i) {
    Result r = run(std::string("generate -p 'def add(a, b):' -n 16 --ignore-eos --json -t 2 --tp ") + (i ? "2" : "1"));
    ASSERT_EQ(r.status, 0) << r.output;
    text[i] = nlohmann::json::parse(r.output.substr(r.output.find('{')))["text"];
  }
  EXPECT_EQ(text[0], text[1]);
  expect_user_error("generate -p x --tp 3", "num_attention_heads");
  expect_user_error("generate -p x --tp 0", "--tp");
}

TEST(Cli, LimitsNameTheFlag) {
  expect_user_error("generate -p x -t 100000", "--threads");
  expect_user_error("generate -p x -t 50000", "at most 8 per core");
  expect_user_error("generate -p x -t -1", "--threads");
  expect_user_error("generate -p x --ctx 2147483647", "--ctx: must be an integer in [1, 16777216]");
  expect_user_error("generate -p x --ctx 10000000", "GiB of KV cache");  // fits the range, not memory
  expect_user_error("serve --parallel 1000000 --port 0", "--parallel");
  expect_user_error("serve --parallel 4000 --ctx 100000 --port 0", "GiB of KV cache");
  expect_user_error("generate -p x --top-k -3", "--top-k");
  expect_user_error("generate -p x --seed -1", "--seed");
  expect_user_error("generate -p x --temperature 5", "--temperature");
  expect_user_error("generate -p x --policy resa:f=0", "must be >= 1");
  expect_user_error("generate -p x --policy quest:budget=inf", "not a finite number");
  expect_user_error("serve --max-body 10 --port 0", "--max-body");
  expect_user_error("serve --request-timeout 0 --port 0", "--request-timeout");
}

TEST(Cli, ErrorsSayWhatAUserDid) {
  expect_user_error("frobnicate", "unknown command 'frobnicate'");
  Result r = run("generate --bogus 1 -p x");
  EXPECT_EQ(r.output.rfind("skim: error: ", 0), 0u) << r.output;  // CLI11's errors carry the prefix too
  // --plot's folder is checked before the evaluation runs, not after it.
  const auto t0 = std::chrono::steady_clock::now();
  expect_user_error("eval --tasks ppl --plot /nonexistent/x.png", "/nonexistent");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output.rfind("skim ", 0), 0u) << r.output;
}

TEST(Cli, ContextAliasesAndProgressLinesInLogs) {
  // -c / --ctx-size are --ctx (llama.cpp's and vLLM's names); stderr that is no terminal gets
  // progress lines (SKIM_PROGRESS_INTERVAL seconds apart; 5 by default).
  std::string prompt;
  for (int i = 0; i < 300; ++i) prompt += "x = " + std::to_string(i) + "\n";
  const fs::path file = fs::temp_directory_path() / ("skim-cli-progress-" + std::to_string(::getpid()) + ".py");
  std::ofstream(file) << prompt;
  Result r = run("generate -c 4096 --chunk 128 -n 1 -f " + file.string() + " --json 2>&1 >/dev/null");
  EXPECT_EQ(r.status, 0) << r.output;
  r = run("generate --ctx-size 4096 --chunk 128 -n 1 -f " + file.string());
  EXPECT_EQ(r.status, 0) << r.output;
  r = Result{};
  const std::string cmd = "SKIM_PROGRESS_INTERVAL=0 " + kSkim.string() + " generate --chunk 128 -n 1 -f " + file.string() +
                          " 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  pclose(p);
  EXPECT_NE(r.output.find("prefill: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" tok/s, ETA "), std::string::npos) << r.output;
  fs::remove(file);
}

TEST(Cli, PromptOverTheContextLimit) {
  expect_user_error("generate --ctx 16 -p '" + std::string(400, 'x') + " y z'", "--ctx");
}

}  // namespace
