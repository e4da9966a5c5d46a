#include "engine/field_checks.h"

#include <unistd.h>

#include <cmath>
#include <thread>

#include "kv/paged_kv_cache.h"
#include "model/config.h"
#include "skim/engine.h"

namespace skim {

namespace {

std::string gib(int64_t bytes) { return fmt::format("{:.1f} GiB", double(bytes) / double(int64_t(1) << 30)); }

}  // namespace

int64_t check_int(const IntField& f, int64_t v) {
  if (v < f.lo || v > f.hi) throw FieldError(f.name, fmt::format("must be an integer in [{}, {}], got {}", f.lo, f.hi, v));
  return v;
}

double check_real(const RealField& f, double v) {
  const bool above_lo = f.lo_open ? v > f.lo : v >= f.lo;
  if (!std::isfinite(v) || !above_lo || v > f.hi)
    throw FieldError(f.name, fmt::format("must be a number in {}{}, {}], got {}", f.lo_open ? "(" : "[", f.lo, f.hi, v));
  return v;
}

int max_threads() { return 8 * int(std::max(1u, std::thread::hardware_concurrency())); }

int check_threads(int64_t v) {
  const int hi = max_threads();
  if (v < 0 || v > hi)
    throw FieldError("threads", fmt::format("must be in [0, {}] (0: all cores; at most 8 per core of this machine's {}), got {}",
                                            hi, hi / 8, v));
  return int(v);
}

void check_sampling(const SamplingParams& s) {
  check_real(fields::kTemperature, s.temperature);
  check_real(fields::kTopP, s.top_p);
  check_int(fields::kTopK, s.top_k);
  if (s.seed > uint64_t(fields::kSeed.hi)) check_int(fields::kSeed, -1);  // (a wrapped negative seed)
}

void check_request(const GenerationRequest& r) {
  check_int(fields::kMaxTokens, r.max_tokens);
  check_sampling(r.sampling);
  if (r.logprobs != -1) check_int(fields::kLogprobs, r.logprobs);
  if (int(r.stop.size()) > fields::kMaxStops)
    throw FieldError("stop", fmt::format("at most {} stop strings, got {}", fields::kMaxStops, r.stop.size()));
  for (const std::string& s : r.stop)
    if (s.empty() || s.size() > fields::kMaxStopBytes)
      throw FieldError("stop", fmt::format("each stop string must have 1 to {} bytes, got {}", fields::kMaxStopBytes, s.size()));
}

void check_engine_options(const EngineOptions& o) {
  check_int(fields::kMaxContext, o.max_context);
  check_int(fields::kMaxSequences, o.max_sequences);
  check_int(fields::kPrefillChunk, o.prefill_chunk);
  check_threads(o.threads);
  check_int(fields::kTensorParallel, o.tensor_parallel);
  if (o.device != "cpu" && o.device != "cuda")
    throw FieldError("device", fmt::format("must be cpu or cuda, got '{}'", o.device));
  check_int(fields::kHostKvSlots, o.host_kv_slots);
  if (o.host_kv_slots != 0 && o.device != "cuda")
    throw FieldError("host_kv_slots", "keeps a GPU's KV cache in host memory: needs device cuda");
  if (o.host_kv_slots != 0 && o.tensor_parallel > 1)
    throw FieldError("host_kv_slots", "not with tensor parallelism (yet)");
}

int64_t kv_cache_bytes(const ModelConfig& c, int64_t context, int64_t sequences, int bytes_per_value) {
  const int64_t page = kDefaultPageSize;
  const int64_t pages = (context + page - 1) / page * sequences;
  const int64_t per_page = int64_t(c.num_kv_heads) * c.head_dim * (2 * page + 2);  // K, V, min, max
  return pages * per_page * c.num_layers * bytes_per_value;
}

void check_kv_memory(const ModelConfig& c, const EngineOptions& o, int bytes_per_value, int64_t available,
                     std::string_view where) {
  const int64_t need = kv_cache_bytes(c, o.max_context, o.max_sequences, bytes_per_value);
  if (need > available)
    throw FieldError("max_context",
                     fmt::format("{} sequence(s) x {} tokens need {} of KV cache ({} layers x {} KV heads x {} dims, "
                                 "{}-byte values), more than the {} of {}; lower the context or the sequences",
                                 o.max_sequences, o.max_context, gib(need), c.num_layers, c.num_kv_heads, c.head_dim,
                                 bytes_per_value, gib(available), where));
}

int64_t physical_memory_bytes() { return int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE)); }

}  // namespace skim
