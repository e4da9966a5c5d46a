#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "core/error.h"
#include "engine/generation.h"
#include "engine/logprobs.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace skim {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

struct Scheduler::Pending {
  uint64_t id;
  GenerationRequest request;
  std::string policy;
  RequestCallbacks cb;
};

struct Scheduler::Prefilling {
  std::unique_ptr<Pending> p;
  int seq;
  size_t done = 0;  // prompt tokens in the cache
  double seconds = 0;
  bool cancelled = false;
  std::vector<TokenLogprob> prompt_logprobs;  // echo_logprobs
};

struct Scheduler::Running {
  uint64_t id;
  int seq;
  Generation gen;
  RequestCallbacks cb;
  int next_token = -1;  // sampled, not yet fed to the model
  bool done = false;
  bool cancelled = false;
  double kv_bytes = 0;  // this request's share of the decode steps' KV reads
  int steps = 0;
  size_t logprobs_sent = 0;  // entries of the result's logprobs passed to on_text
};

Scheduler::Scheduler(Engine& engine, SchedulerOptions options)
    : engine_(engine), options_(options), default_policy_(engine.policy_spec()), prefixes_(engine, options.cache_slots) {
  if (options_.max_running <= 0) options_.max_running = engine.max_sequences();
  SKIM_REQUIRE(options_.cache_slots >= 0, "prefix cache slots must be >= 0");
  SKIM_REQUIRE(options_.max_running + options_.cache_slots <= engine.max_sequences(),
               "scheduler: {} running + {} cached sequences exceed the engine's {}", options_.max_running,
               options_.cache_slots, engine.max_sequences());
  prefix_ok_ = prefixes_.usable();
  if (options_.worker) worker_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (auto& p : waiting_)
    if (p->cb.on_error) p->cb.on_error("server shutting down");
  fail_all_running("server shutting down");
  prefixes_.clear();
}

uint64_t Scheduler::submit(GenerationRequest request, std::string policy, RequestCallbacks callbacks) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t id = next_id_++;
  waiting_.push_back(std::make_unique<Pending>(
      Pending{id, std::move(request), policy.empty() ? default_policy_ : std::move(policy), std::move(callbacks)}));
  metrics_.waiting = int(waiting_.size());
  cv_.notify_all();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  cancelled_.push_back(id);
  cv_.notify_all();
}

void Scheduler::end_all(const std::string& finish_reason) {
  std::lock_guard<std::mutex> lk(mu_);
  end_reason_ = finish_reason.empty() ? "abort" : finish_reason;
  cv_.notify_all();
}

// Worker thread: what end_all() asked.
void Scheduler::end_everything(const std::string& reason, std::deque<std::unique_ptr<Pending>> queued) {
  for (auto& p : queued)
    if (p->cb.on_error) p->cb.on_error("server shutting down");
  for (auto& r : running_) {
    r->gen.result().stats.finish_reason = reason;
    r->done = true;
    finish(*r);
  }
  running_.clear();
  fail_all_running("server shutting down");  // (those still prefilling)
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.running = 0;
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lk(mu_);
  return metrics_;
}

void Scheduler::loop() {
  while (true) {
    std::vector<std::unique_ptr<Pending>> admitted;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stop_ || !waiting_.empty() || !prefilling_.empty() || !running_.empty() || !cancelled_.empty() ||
               !end_reason_.empty();
      });
      if (stop_) return;
      if (!collect(lk, admitted)) continue;
    }
    run(admitted);
  }
}

bool Scheduler::step() {
  SKIM_REQUIRE(!worker_.joinable(), "scheduler: step() is for a scheduler without a worker thread");
  std::vector<std::unique_ptr<Pending>> admitted;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (!collect(lk, admitted)) return false;
    if (admitted.empty() && waiting_.empty() && prefilling_.empty() && running_.empty()) return false;
  }
  run(admitted);
  std::lock_guard<std::mutex> lk(mu_);
  return !waiting_.empty() || !prefilling_.empty() || !running_.empty();
}

bool Scheduler::collect(std::unique_lock<std::mutex>& lk, std::vector<std::unique_ptr<Pending>>& admitted) {
  if (!end_reason_.empty()) {
    std::string reason;
    reason.swap(end_reason_);
    std::deque<std::unique_ptr<Pending>> queued;
    queued.swap(waiting_);
    metrics_.waiting = 0;
    lk.unlock();
    end_everything(reason, std::move(queued));
    lk.lock();
    return false;
  }
  for (uint64_t id : cancelled_) {
    for (auto& r : running_)
      if (r->id == id) r->cancelled = true;
    for (auto& f : prefilling_)
      if (f->p->id == id) f->cancelled = true;
    const size_t before = waiting_.size();
    std::erase_if(waiting_, [id](const auto& p) { return p->id == id; });
    metrics_.requests_cancelled += before - waiting_.size();
  }
  cancelled_.clear();
  admit(admitted);
  metrics_.waiting = int(waiting_.size());
  return true;
}

void Scheduler::run(std::vector<std::unique_ptr<Pending>>& admitted) {
  try {
    drop_cancelled();
    for (auto& p : admitted) start(std::move(p));
    if (!admitted.empty()) {  // published before any of them streams its first token
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.running = int(running_.size() + prefilling_.size());
    }
    if (!prefilling_.empty()) prefill_chunk();
    if (!running_.empty()) decode();
  } catch (const std::exception& e) {  // nothing may end the worker: fail what is in flight
    fail_all_running(std::string("internal error: ") + e.what());
  }
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.running = int(running_.size() + prefilling_.size());
}

void Scheduler::drop_cancelled() {
  int n = 0;
  for (auto& r : running_)
    if (r->cancelled) engine_.close_sequence(r->seq), ++n;
  for (auto& f : prefilling_)
    if (f->cancelled) engine_.close_sequence(f->seq), ++n;
  std::erase_if(running_, [](const auto& r) { return r->cancelled; });
  std::erase_if(prefilling_, [](const auto& f) { return f->cancelled; });
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.requests_cancelled += uint64_t(n);
}

// Under mu_. Takes waiting requests in order while sequences are free; on an engine that runs
// one policy at a time, one that needs another policy is taken only into an empty engine, and
// alone.
void Scheduler::admit(std::vector<std::unique_ptr<Pending>>& batch) {
  const size_t slots = size_t(options_.max_running);
  while (!waiting_.empty() && running_.size() + prefilling_.size() + batch.size() < slots) {
    const bool switch_needed = !engine_.mixes_policies() && waiting_.front()->policy != engine_.policy_spec();
    if (switch_needed && !(running_.empty() && prefilling_.empty() && batch.empty())) return;
    batch.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    if (switch_needed) return;
  }
}

// Switches the policy when the request needs it (or gives its sequence the request's policy,
// on an engine that mixes them) and opens its sequence; the prompt follows chunk by chunk.
void Scheduler::start(std::unique_ptr<Pending> p) {
  int seq = -1;
  try {
    if (!engine_.mixes_policies() && p->policy != engine_.policy_spec()) {
      prefixes_.clear();  // cached under another policy
      engine_.set_policy(p->policy);
      prefix_ok_ = prefixes_.usable();
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.policy_switches += 1;
    }
    SKIM_REQUIRE(!p->request.prompt_ids.empty(), "empty prompt");
    // (A prompt whose own log-probabilities are asked for is prefilled whole.)
    const bool echo = p->request.echo_logprobs && p->request.logprobs >= 0;
    auto [cached, reused] = prefix_ok_ && !echo ? prefixes_.reuse(p->request.prompt_ids) : std::pair<int, int>{-1, 0};
    seq = cached >= 0 ? cached : engine_.open_sequence();
    engine_.set_sequence_policy(seq, p->policy);
    if (reused > 0) {
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.prefix_hits = prefixes_.hits();
      metrics_.prefix_tokens_reused = prefixes_.tokens_reused();
    }
    auto f = std::make_unique<Prefilling>();
    f->p = std::move(p);
    f->seq = seq;
    f->done = size_t(reused);
    prefilling_.push_back(std::move(f));
  } catch (const std::exception& e) {
    if (seq >= 0) engine_.close_sequence(seq);  // its policy refused (a ninth on the GPU)
    if (p->cb.on_error) p->cb.on_error(e.what());
    std::lock_guard<std::mutex> lk(mu_);
    metrics_.requests_failed += 1;
  }
}

// One chunk of the oldest prompt being prefilled; after its last chunk, its first token.
void Scheduler::prefill_chunk() {
  Prefilling& f = *prefilling_.front();
  const std::vector<int>& ids = f.p->request.prompt_ids;
  std::vector<float> logits;
  try {
    // A last piece of one token would run as a decode step (Engine::append): it goes with
    // the chunk before (append splits it off again, as a prefill row). The chunk boundaries
    // are those of one append of the whole prompt, so the cache comes out the same.
    // Logits of the chunk's last row (the first token's) when the prompt is done; of every row
    // when the request wants the prompt's log-probabilities.
    const GenerationRequest& rq = f.p->request;
    const bool echo = rq.echo_logprobs && rq.logprobs >= 0;
    // A prompt that runs layer by layer (KV beyond GPU memory) goes in whole: the other
    // sequences' decode steps wait for it, where chunk by chunk it would read its prefix over
    // PCIe once per chunk. Not with the prompt's log-probabilities (a logits row per token).
    const size_t left = ids.size() - f.done;
    size_t n = !echo && engine_.prefills_by_layer(f.seq) ? left : std::min(size_t(engine_.prefill_chunk()), left);
    if (left - n == 1) n = left;
    const bool last = f.done + n == ids.size();
    std::vector<int> rows;
    if (echo)
      for (int i = 0; i < int(n); ++i) rows.push_back(i);
    else if (last)
      rows.push_back(int(n) - 1);
    const double t0 = now_seconds();
    logits = engine_.append(f.seq, std::span<const int>(ids.data() + f.done, n), rows);
    f.seconds += now_seconds() - t0;
    if (echo) {  // rows of this chunk score the prompt's next tokens (the last row: none)
      const size_t vocab = size_t(engine_.config().vocab_size);
      const size_t scored = std::min(n, ids.size() - 1 - f.done);
      append_logprobs(logits, vocab, std::span<const int>(ids).subspan(f.done + 1, scored), rq.logprobs,
                      f.prompt_logprobs);
      if (last) logits.erase(logits.begin(), logits.end() - std::ptrdiff_t(vocab));  // the last row's
    }
    f.done += n;
    if (f.p->cb.on_prefill) f.p->cb.on_prefill(int(f.done), int(ids.size()));
    if (!last) return;
  } catch (const std::exception& e) {
    engine_.close_sequence(f.seq);
    if (f.p->cb.on_error) f.p->cb.on_error(e.what());
    prefilling_.pop_front();
    std::lock_guard<std::mutex> lk(mu_);
    metrics_.requests_failed += 1;
    return;
  }
  std::unique_ptr<Prefilling> done = std::move(prefilling_.front());
  prefilling_.pop_front();
  {
    std::lock_guard<std::mutex> lk(mu_);
    metrics_.prompt_tokens += ids.size();
    metrics_.prefill_seconds += done->seconds;
  }
  const GenerationRequest& rq = done->p->request;
  auto r = std::make_unique<Running>(Running{done->p->id, done->seq,
                                             Generation(rq, engine_.tokenizer(), engine_.config().eos_token_ids),
                                             std::move(done->p->cb)});
  GenerationStats& stats = r->gen.result().stats;
  stats.prompt_tokens = int(rq.prompt_ids.size());
  stats.prefill_seconds = done->seconds;
  r->gen.result().prompt_logprobs = std::move(done->prompt_logprobs);
  if (rq.max_tokens == 0) {
    stats.finish_reason = "length";
    finish(*r);
    return;
  }
  const int vocab = engine_.config().vocab_size;
  const int token = r->gen.sample(std::span<const float>(logits.data(), size_t(vocab)));
  r->done = r->gen.accept(token);
  r->next_token = token;
  emit(*r);
  if (r->done)
    finish(*r);
  else
    running_.push_back(std::move(r));
}

void Scheduler::decode() {
  for (auto& r : running_)
    if (at_context_limit(engine_, r->seq)) {
      r->gen.result().stats.finish_reason = "length";
      r->done = true;
      finish(*r);
    }
  std::erase_if(running_, [](const auto& r) { return r->done; });
  if (running_.empty()) return;

  std::vector<int> seqs, tokens;
  std::vector<Generation*> gens;
  for (auto& r : running_) {
    seqs.push_back(r->seq);
    tokens.push_back(r->next_token);
    gens.push_back(&r->gen);
  }
  const double t0 = now_seconds(), bytes0 = engine_.decode_kv_bytes_read();
  std::vector<int> next;
  try {
    next = decode_step(engine_, seqs, tokens, gens);
  } catch (const std::exception& e) {
    fail_running(e.what());
    return;
  }
  const double dt = now_seconds() - t0;
  const double bytes_each = (engine_.decode_kv_bytes_read() - bytes0) / double(running_.size());
  {
    std::lock_guard<std::mutex> lk(mu_);
    metrics_.decode_steps += 1;
    metrics_.decode_seconds += dt;
    metrics_.rectified_tokens = engine_.rectified_tokens();
    metrics_.rectification_passes = engine_.rectification_passes();
  }
  for (size_t j = 0; j < running_.size(); ++j) {
    Running& r = *running_[j];
    if (r.steps == 0) r.gen.result().stats.first_step_seconds = dt;
    r.gen.result().stats.decode_seconds += dt;
    r.kv_bytes += bytes_each;
    r.steps += 1;
    r.done = r.gen.accept(next[j]);
    r.next_token = next[j];
    emit(r);
    if (r.done) finish(r);
  }
  std::erase_if(running_, [](const auto& r) { return r->done; });
}

// Streams what the last accepted token made printable, and its log-probability.
void Scheduler::emit(Running& r) {
  const std::string piece = r.gen.take_text(r.done);
  const std::vector<TokenLogprob>& lps = r.gen.result().logprobs;
  const std::span<const TokenLogprob> fresh(lps.data() + r.logprobs_sent, lps.size() - r.logprobs_sent);
  r.logprobs_sent = lps.size();
  if ((!piece.empty() || !fresh.empty()) && r.cb.on_text) r.cb.on_text(piece, fresh);
}

void Scheduler::finish(Running& r) {
  if (prefix_ok_)
    prefixes_.keep(r.seq, r.gen.request().prompt_ids);
  else
    engine_.close_sequence(r.seq);
  GenerationResult& res = r.gen.result();
  res.stats.generated_tokens = int(res.tokens.size());
  res.stats.kv_bytes_per_step = r.steps ? r.kv_bytes / r.steps : 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    metrics_.requests_finished += 1;
    metrics_.generated_tokens += res.tokens.size();
    // Its sequence is free before the client hears of it (the loop recounts exactly after
    // the step): a server checking for room never sees a finished request as running.
    metrics_.running = std::max(0, metrics_.running - 1);
  }
  if (r.cb.on_done) r.cb.on_done(res);
}

// The decoding requests fail with `message` and give their sequences back.
void Scheduler::fail_running(const std::string& message) {
  std::erase_if(running_, [](const auto& r) { return r->done; });  // finished: answered already
  for (auto& r : running_) {
    try {
      engine_.close_sequence(r->seq);
    } catch (const std::exception&) {
    }
    if (r->cb.on_error) r->cb.on_error(message);
  }
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.requests_failed += running_.size();
  running_.clear();
}

// Every request holding a sequence, decoding or still prefilling.
void Scheduler::fail_all_running(const std::string& message) {
  for (auto& f : prefilling_) {
    try {
      engine_.close_sequence(f->seq);
    } catch (const std::exception&) {
    }
    if (f->p->cb.on_error) f->p->cb.on_error(message);
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    metrics_.requests_failed += prefilling_.size();
  }
  prefilling_.clear();
  fail_running(message);
}

}  // namespace skim
