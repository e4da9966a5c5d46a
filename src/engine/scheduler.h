// Continuous batching, the one generation loop of skim: a step admits waiting requests while
// sequences are free, prefills one chunk of one admitted prompt, then advances every live
// sequence by one decode step, streaming text to each request's callbacks. A long prompt thus
// delays the running requests' tokens by one chunk per step, not by its whole prefill. A
// finished or cancelled request frees its sequence for the next waiting one at once.
//
// The server runs the steps on a worker thread that owns the engine (requests arrive from any
// thread); Engine::generate runs them on its caller's thread (SchedulerOptions::worker false,
// then step() until it returns false), nano-vllm's LLMEngine.step over its scheduler.
//
// Per-request policies: on an engine that mixes policies (the GPU), each request's sequence
// runs its own policy in the shared batch. On the CPU the engine runs one policy at a time,
// so a request whose policy differs from the running one waits until the live batch has
// drained, then the engine switches (first come, first served: requests behind it wait too).
//
// A request that fails (a prompt over the context, an engine error) gets on_error and its
// sequence back; the worker and the other requests go on.
//
// With cache_slots > 0, finished prompts go to a PrefixCache (engine/prefix_cache.h) that new
// prompts starting with them resume from.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/prefix_cache.h"
#include "skim/engine.h"

namespace skim {

struct RequestCallbacks {
  // Printable pieces, in order, with the log-probabilities of the tokens accepted since the
  // last call (when the request asks for them; a call may carry either alone).
  std::function<void(std::string_view, std::span<const TokenLogprob>)> on_text;
  std::function<void(const GenerationResult&)> on_done;      // last call on success
  std::function<void(const std::string& message)> on_error;  // last call on failure
  std::function<void(int done, int total)> on_prefill;       // prompt tokens in the cache
};

// Totals since start (for /metrics).
struct SchedulerOptions {
  int max_running = 0;  // sequences decoding at once (0: the engine's max_sequences)
  int cache_slots = 0;  // prefix cache entries (they hold sequences: the engine needs
                        // max_running + cache_slots of them)
  bool worker = true;   // a worker thread runs the steps; false: the caller's step() does
};

struct SchedulerMetrics {
  uint64_t requests_finished = 0, requests_failed = 0, requests_cancelled = 0;
  uint64_t prefix_hits = 0, prefix_tokens_reused = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  uint64_t decode_steps = 0, policy_switches = 0;
  uint64_t rectified_tokens = 0, rectification_passes = 0;  // the engine's, after the last step
  double prefill_seconds = 0, decode_seconds = 0;
  int running = 0, waiting = 0;
};

class Scheduler {
 public:
  explicit Scheduler(Engine& engine, SchedulerOptions options = {});
  ~Scheduler();  // finishes nothing: pending requests get on_error("server shutting down")
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (prompt_ids must be set: tokenise before, so that a too long prompt is
  // refused to the caller). An empty `policy` means the engine's policy at start.
  // Returns an id for cancel(). Callbacks run on the worker thread.
  uint64_t submit(GenerationRequest request, std::string policy, RequestCallbacks callbacks);
  // The request stops at the next step; no further callbacks (a client that went away).
  void cancel(uint64_t id);

  // Ends every request now: those decoding finish with `finish_reason` (their text so far),
  // those queued or prefilling fail with "server shutting down". For a server that drains.
  void end_all(const std::string& finish_reason);

  // Without a worker: one step on the caller's thread. Returns false once nothing is waiting,
  // prefilling or decoding (every submitted request has had on_done or on_error).
  bool step();

  SchedulerMetrics metrics() const;
  const std::string& default_policy() const { return default_policy_; }

 private:
  struct Pending;
  struct Prefilling;
  struct Running;
  void loop();
  // Under mu_: end_all's request (handled, false), the cancellations, then admission.
  bool collect(std::unique_lock<std::mutex>& lk, std::vector<std::unique_ptr<Pending>>& admitted);
  void run(std::vector<std::unique_ptr<Pending>>& admitted);  // the step's work
  void admit(std::vector<std::unique_ptr<Pending>>& batch);
  void start(std::unique_ptr<Pending> p);
  void prefill_chunk();
  void decode();
  void drop_cancelled();
  void fail_running(const std::string& message);
  void fail_all_running(const std::string& message);
  void finish(Running& r);
  void end_everything(const std::string& reason, std::deque<std::unique_ptr<Pending>> queued);
  void emit(Running& r);

  Engine& engine_;
  SchedulerOptions options_;
  std::string default_policy_;
  PrefixCache prefixes_;    // worker thread only
  bool prefix_ok_ = false;  // prefixes_ usable under the running policy
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> waiting_;
  std::vector<uint64_t> cancelled_;  // ids cancel() saw, taken by the worker
  std::string end_reason_;           // end_all() asked, taken by the worker
  std::deque<std::unique_ptr<Prefilling>> prefilling_;  // worker thread only, in order
  std::vector<std::unique_ptr<Running>> running_;       // worker thread only
  SchedulerMetrics metrics_;  // under mu_
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace skim
