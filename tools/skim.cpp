// skim: long-context decoding with KV-frugal attention policies.
// Errors meant for users (bad flags, files, configs) print one line and exit with status 2.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"skim: long-context LLM decoding that reads only the KV cache it needs"};
  app.require_subcommand(1);
  std::function<void()> run;
  skim::cli::register_generate(app, run);
  skim::cli::register_eval(app, run);
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
