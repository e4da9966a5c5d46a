// Work a policy does per decode step (DESIGN.md section 7): KV bytes read, including the
// selection metadata and ReSA's rectification passes, relative to what dense attention reads
// at the same positions; and decode speed.
#pragma once

#include <cstdint>
#include <functional>

namespace skim {
class Engine;
}

namespace skim::eval {

struct DecodeWork {
  uint64_t steps = 0;
  uint64_t keys_read = 0;       // key/value rows attention read, summed over layers and KV heads
  uint64_t metadata_bytes = 0;  // digests and tables read to select
  uint64_t dense_keys = 0;      // rows dense attention would have read at the same positions
  uint64_t rectified_tokens = 0;
  uint64_t rectify_keys = 0;    // rows rectification reads: the whole cache once per pass
  double seconds = 0;           // decode wall time, evaluation overhead excluded
  // The first step of each measured run, apart: a policy builds its per-sequence state there
  // (CSAttention's tables, MAC's prefix states of the prompt's ring entries), a cost paid
  // once per request, like the prefill's, not per generated token.
  uint64_t first_steps = 0;
  double first_step_seconds = 0;

  void add(const DecodeWork& o);
};

// Bytes per decode step: rows x head_dim x (K and V) x bytes per value, plus metadata.
struct WorkSummary {
  double bytes_per_step = 0;
  double dense_bytes_per_step = 0;
  double rectify_bytes_per_step = 0;  // included in bytes_per_step
  double relative_to_dense = 0;
  double tokens_per_second = 0;   // steady: the steps after each run's first
  double first_step_seconds = 0;  // mean over runs of the first step's time
};
WorkSummary summarize(const DecodeWork& w, int head_dim, int bytes_per_value = 4);

// Measures the decode steps a loop runs on one sequence under the engine's current policy:
// construct before the loop, call step_done after each Engine::decode, finish after.
class DecodeWorkMeter {
 public:
  // `overhead_seconds`, when given, is a clock of the time spent inside the loop on evaluation
  // (observers), not decoding; it is subtracted from the step times.
  DecodeWorkMeter(Engine& engine, int seq, std::function<double()> overhead_seconds = {});
  void step_done();
  DecodeWork finish();

 private:
  Engine& engine_;
  int seq_;
  DecodeWork start_;  // policy counters when the meter started
  DecodeWork run_;    // steps and rectification seen by this meter
  std::function<double()> overhead_;
  double start_seconds_ = 0;
  double first_step_seconds_ = 0;
  double overhead_seconds() const { return overhead_ ? overhead_() : 0.0; }
};

double now_seconds();  // monotonic clock

}  // namespace skim::eval
