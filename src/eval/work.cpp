#include "eval/work.h"

#include <algorithm>
#include <chrono>

#include "attention/policy.h"
#include "model/config.h"
#include "skim/engine.h"

namespace skim::eval {

void DecodeWork::add(const DecodeWork& o) {
  steps += o.steps;
  keys_read += o.keys_read;
  metadata_bytes += o.metadata_bytes;
  dense_keys += o.dense_keys;
  rectified_tokens += o.rectified_tokens;
  rectify_keys += o.rectify_keys;
  seconds += o.seconds;
  first_steps += o.first_steps;
  first_step_seconds += o.first_step_seconds;
}

WorkSummary summarize(const DecodeWork& w, int head_dim, int bytes_per_value) {
  WorkSummary s;
  if (w.steps == 0) return s;
  const double row_bytes = double(head_dim) * 2 * bytes_per_value;
  const double steps = double(w.steps);
  s.rectify_bytes_per_step = double(w.rectify_keys) * row_bytes / steps;
  s.bytes_per_step = (double(w.keys_read) * row_bytes + double(w.metadata_bytes)) / steps +
                     s.rectify_bytes_per_step;
  s.dense_bytes_per_step = double(w.dense_keys) * row_bytes / steps;
  s.relative_to_dense = s.dense_bytes_per_step > 0 ? s.bytes_per_step / s.dense_bytes_per_step : 0;
  // Steady decode speed: without each run's first step when the runs have later ones (a run of
  // one step has nothing else to measure).
  const bool steady = w.steps > w.first_steps && w.seconds > w.first_step_seconds;
  const double timed_steps = steady ? double(w.steps - w.first_steps) : steps;
  const double timed_seconds = steady ? w.seconds - w.first_step_seconds : w.seconds;
  s.tokens_per_second = timed_seconds > 0 ? timed_steps / timed_seconds : 0;
  s.first_step_seconds = w.first_steps ? w.first_step_seconds / double(w.first_steps) : 0;
  return s;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

namespace {
DecodeWork counters(Engine& e) {
  const AttentionStats& s = e.policy().stats();
  DecodeWork w;
  w.keys_read = s.decode_keys_read;
  w.metadata_bytes = s.decode_metadata_bytes;
  w.dense_keys = s.decode_context;
  w.rectified_tokens = e.rectified_tokens();
  return w;
}
}  // namespace

DecodeWorkMeter::DecodeWorkMeter(Engine& engine, int seq, std::function<double()> overhead)
    : engine_(engine), seq_(seq), start_(counters(engine)), overhead_(std::move(overhead)) {
  run_.rectified_tokens = start_.rectified_tokens;
  start_seconds_ = now_seconds() - overhead_seconds();  // time on the decode clock
}

void DecodeWorkMeter::step_done() {
  run_.steps += 1;
  if (run_.steps == 1) first_step_seconds_ = std::max(0.0, now_seconds() - overhead_seconds() - start_seconds_);
  uint64_t rect = engine_.rectified_tokens();
  if (rect != run_.rectified_tokens) {
    // A rectification pass ran: one dense prefill chunk over the whole cache, which a tiled
    // kernel reads once for the chunk, in every layer and KV head.
    const ModelConfig& c = engine_.config();
    run_.rectify_keys += uint64_t(engine_.sequence_length(seq_)) * c.num_layers * c.num_kv_heads;
    run_.rectified_tokens = rect;
  }
}

DecodeWork DecodeWorkMeter::finish() {
  DecodeWork now = counters(engine_);
  DecodeWork w;
  w.steps = run_.steps;
  w.keys_read = now.keys_read - start_.keys_read;
  w.metadata_bytes = now.metadata_bytes - start_.metadata_bytes;
  w.dense_keys = now.dense_keys - start_.dense_keys;
  w.rectified_tokens = now.rectified_tokens - start_.rectified_tokens;
  w.rectify_keys = run_.rectify_keys;
  w.seconds = std::max(0.0, now_seconds() - overhead_seconds() - start_seconds_);
  if (w.steps > 0) {
    w.first_steps = 1;
    w.first_step_seconds = std::min(first_step_seconds_, w.seconds);
  }
  return w;
}

}  // namespace skim::eval
