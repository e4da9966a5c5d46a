// skim: long-context decoding with KV-frugal attention policies.
// Errors meant for users (bad flags, files, configs) print one line and exit with status 2.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "commands.h"
#include "core/error.h"

// libgomp reads OMP_WAIT_POLICY when it loads, before main. Its default spin-waiting at every
// barrier turns into whole scheduler time slices when the machine has more runnable threads
// than cores: a decode step measured 40x slower (726 vs 17 ms, demo model, 2 cores at load 4).
// Sleeping waits cost about a millisecond per step on an idle machine, so they are the
// default; setting OMP_WAIT_POLICY yourself (e.g. active) overrides it.
static void prefer_passive_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then carry on as we are
}

int main(int argc, char** argv) {
  prefer_passive_openmp_waits(argv);
  CLI::App app{"skim: long-context LLM decoding that reads only the KV cache it needs"};
  app.require_subcommand(1);
  std::function<void()> run;
  skim::cli::register_generate(app, run);
  skim::cli::register_eval(app, run);
  skim::cli::register_bench(app, run);
  skim::cli::register_serve(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (run) run();
  } catch (const skim::Error& e) {
    std::fprintf(stderr, "skim: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "skim: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
