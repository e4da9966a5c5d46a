// The range of every value a user sets, checked in one place for the library, the CLI and the
// server, so that all three accept and refuse the same values with the same words. A check
// throws FieldError, which carries the library's name of the field ("top_k", "max_context");
// each front end names it its own way (the CLI's --top-k, the server's JSON field top_k).
//
// Integers are checked as 64-bit values before they are narrowed: a JSON number of 2^32 + 5
// is out of range, never 5.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "core/error.h"
#include "kv/host_kv_budget.h"

namespace skim {

struct EngineOptions;
struct GenerationRequest;
struct SamplingParams;
struct ModelConfig;

class FieldError : public Error {
 public:
  FieldError(std::string field, std::string detail)
      : Error(field + ": " + detail), field(std::move(field)), detail(std::move(detail)) {}
  std::string field;   // the library's name of the field
  std::string detail;  // what is wrong, without the field's name ("must be ..., got ...")
};

struct IntField {
  const char* name;
  int64_t lo, hi;
};
struct RealField {
  const char* name;
  double lo, hi;
  bool lo_open = false;  // (lo, hi] instead of [lo, hi]
};

namespace fields {
inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
// A request.
inline constexpr IntField kMaxTokens{"max_tokens", 0, kInt32Max};
inline constexpr IntField kTopK{"top_k", 0, kInt32Max};  // 0: off; above the vocabulary: off
inline constexpr IntField kSeed{"seed", 0, std::numeric_limits<int64_t>::max()};
inline constexpr IntField kLogprobs{"logprobs", 0, 20};
inline constexpr IntField kChoices{"n", 1, 16};
inline constexpr RealField kTemperature{"temperature", 0.0, 2.0};
inline constexpr RealField kTopP{"top_p", 0.0, 1.0, true};
inline constexpr int kMaxStops = 4;
inline constexpr size_t kMaxStopBytes = 256;
// An engine. The context and the sequences are bounded again by memory (check_kv_memory).
inline constexpr IntField kMaxContext{"max_context", 1, int64_t(1) << 24};
inline constexpr IntField kMaxSequences{"max_sequences", 1, 4096};
inline constexpr IntField kPrefillChunk{"prefill_chunk", 0, 65536};  // 0: the device default
inline constexpr IntField kTensorParallel{"tensor_parallel", 1, 64};
inline constexpr IntField kHostKvSlots{"host_kv_slots", kHostKvSlotsAuto, kHostKvMaxSlots};  // -1: auto
}  // namespace fields

// `value` when it lies in the field's range; otherwise FieldError naming the range.
int64_t check_int(const IntField& field, int64_t value);
double check_real(const RealField& field, double value);

// Threads: 0 (all cores) up to 8 per core; more only slows a CPU down, and libgomp fails
// on some (50000 threads) or crashes on others.
int max_threads();
int check_threads(int64_t value);

// The sampling fields, a whole request (max_tokens, stop strings, logprobs), and an engine's
// options before anything is allocated.
void check_sampling(const SamplingParams& s);
void check_request(const GenerationRequest& r);
void check_engine_options(const EngineOptions& o);

// The KV cache of `sequences` x `context` tokens of this model, in `bytes_per_value`-byte
// values (4 on the CPU, 2 on the GPU), with page digests; and the check that it fits in
// `available` bytes (FieldError on max_context, naming the bytes it needs).
int64_t kv_cache_bytes(const ModelConfig& c, int64_t context, int64_t sequences, int bytes_per_value);
void check_kv_memory(const ModelConfig& c, const EngineOptions& o, int bytes_per_value, int64_t available,
                     std::string_view where);
// This machine's physical memory, bytes.
int64_t physical_memory_bytes();

}  // namespace skim
