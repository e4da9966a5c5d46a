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

// Seconds between progress lines when stderr is not a terminal (a log): 5, or
// $SKIM_PROGRESS_INTERVAL.
inline constexpr double kLogProgressSeconds = 5.0;
double progress_interval_seconds();

// Progress of a long prefill on stderr: a bar on a terminal; otherwise a line every few
// seconds (tokens done, rate, time left), for the logs of batch jobs.
ProgressCallback prefill_progress(const std::string& label);

// Fails naming `flag` unless `path` can be created or overwritten (its folder exists and is
// writable), so that a long job does not fail only at its end.
void require_writable_file(const std::filesystem::path& path, const std::string& flag);

// --model, --ctx (-c, --ctx-size), --threads, --policy, --chunk, --device
void add_engine_flags(CLI::App& app, EngineOptions& options);

// The flag a library field is set by (FieldError::field): "top_k" -> "--top-k".
std::string flag_of_field(const std::string& field);

// --seed as a signed integer (so that -1 is refused, not wrapped) into `seed`.
void add_seed_flag(CLI::App& app, uint64_t& seed, const std::string& help);

// --host-kv-slots N or auto (kHostKvSlotsAuto) into `slots`.
CLI::Option* add_host_kv_slots_flag(CLI::App& app, int& slots, const std::string& help);
// KV beyond GPU memory: layers that attend every key read it over PCIe each step, which is
// slow. The note for the policy's such layers (dense; quest's dense_layers), or "" (generate
// and serve print it on stderr once the engine is up).
std::string host_kv_dense_note(const EngineOptions& o);
// --host-kv-prefetch (the default) and --no-host-kv-prefetch, each only beside `slots`.
void add_host_kv_prefetch_flags(CLI::App& app, bool& prefetch, CLI::Option* slots);

}  // namespace skim::cli
