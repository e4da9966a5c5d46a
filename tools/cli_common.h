// Pieces the `skim` subcommands share: locating the demo model, reading prompt files,
// the progress bar, and the policy/model flags.
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <string>

#include "skim/engine.h"

namespace skim::cli {

// The demo model shipped in the repository, searched next to the working directory and
// the executable, so `skim generate` works with no --model.
std::filesystem::path default_model_dir();

std::string read_text_file(const std::filesystem::path& path, const std::string& flag);

// A progress bar on stderr when it is a terminal; nothing otherwise.
ProgressCallback terminal_progress(const std::string& label);

// --model, --ctx, --threads, --policy
void add_engine_flags(CLI::App& app, EngineOptions& options);

}  // namespace skim::cli
