// skim: long-context decoding with KV-frugal attention policies.
// Errors meant for users (bad flags, files, configs) print one line and exit with status 2.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "commands.h"
#include "cli_common.h"
#include "core/error.h"
#include "engine/field_checks.h"

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

// CLI11 says "A subcommand is required" for a misspelt one: name it instead.
void check_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return;
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == argv[1]) return;
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  skim::fail("unknown command '{}' (commands: {}; see skim --help)", argv[1], names);
}

int main(int argc, char** argv) {
  prefer_passive_openmp_waits(argv);
  CLI::App app{"skim: long-context LLM decoding that reads only the KV cache it needs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("skim ") + SKIM_VERSION);
  std::function<void()> run;
  skim::cli::register_generate(app, run);
  skim::cli::register_eval(app, run);
  skim::cli::register_bench(app, run);
  skim::cli::register_serve(app, run);
  skim::cli::register_policies(app, run);
  try {
    check_subcommand(app, argc, argv);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
      std::fprintf(stderr, "skim: error: %s\nRun 'skim --help' (or 'skim COMMAND --help') for usage.\n", e.what());
      return 2;
    }
    if (run) run();
  } catch (const skim::FieldError& e) {  // a library field: named by its flag
    std::fprintf(stderr, "skim: error: %s: %s\n", skim::cli::flag_of_field(e.field).c_str(), e.detail.c_str());
    return 2;
  } catch (const skim::Error& e) {
    std::fprintf(stderr, "skim: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "skim: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
