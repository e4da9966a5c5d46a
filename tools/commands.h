// Each subcommand registers its flags on the root app and, when chosen, sets `run`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace skim::cli {

void register_generate(CLI::App& root, std::function<void()>& run);
void register_eval(CLI::App& root, std::function<void()>& run);
void register_bench(CLI::App& root, std::function<void()>& run);
void register_serve(CLI::App& root, std::function<void()>& run);
void register_policies(CLI::App& root, std::function<void()>& run);

}  // namespace skim::cli
