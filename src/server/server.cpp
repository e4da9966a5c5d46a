#include "server/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>

#include "core/error.h"
#include "engine/scheduler.h"
#include "model/config.h"
#include "server/openai_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace skim::server {

using nlohmann::json;

namespace {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Invalid UTF-8 (a token cut mid-character at the end of a generation) becomes U+FFFD
// instead of an exception.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

// Server-sent events of one streamed request: the scheduler's worker pushes, the HTTP thread
// that holds the connection drains.
struct EventQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> events;
  bool finished = false;

  void push(std::string event, bool last) {
    {
      std::lock_guard<std::mutex> lk(mu);
      events.push_back(std::move(event));
      finished = finished || last;
    }
    cv.notify_all();
  }
};

// The result of one non-streamed request.
struct Outcome {
  bool ok = false;
  GenerationResult result;
  std::string error;
};

}  // namespace

struct Server::Impl {
  Engine& engine;
  ServerOptions options;
  ServedModel model;
  Scheduler scheduler;
  httplib::Server http;
  int port = -1;
  std::atomic<uint64_t> next_id{1};
  std::atomic<uint64_t> rejected{0};  // answered 4xx/503 before reaching the scheduler

  Impl(Engine& e, ServerOptions o)
      : engine(e), options(std::move(o)), scheduler(e, SchedulerOptions{options.max_running, options.prefix_cache}) {
    model.name = options.model_name;
    model.tokenizer = &e.tokenizer();
    if (!options.chat_template_file.empty())
      model.chat = std::make_shared<const ChatTemplate>(ChatTemplate::from_file(options.chat_template_file, options.model_dir));
    else if (auto t = ChatTemplate::from_model_dir(options.model_dir))
      model.chat = std::make_shared<const ChatTemplate>(std::move(*t));
    model.max_context = e.max_context();
    model.logprobs = !e.on_gpu();
    routes();
  }

  void routes() {
    http.new_task_queue = [n = options.http_threads] { return new httplib::ThreadPool(size_t(n)); };
    // An API key guards /v1/* (health and metrics stay open, for probes and scrapers).
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + options.api_key)
        return httplib::Server::HandlerResponse::Unhandled;
      rejected += 1;
      send_json(res, 401, error_body("missing or wrong API key (Authorization: Bearer ...)", "authentication_error"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"status", "ok"}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200,
                {{"object", "list"},
                 {"data", json::array({{{"id", model.name},
                                        {"object", "model"},
                                        {"created", 0},
                                        {"owned_by", "skim"},
                                        {"max_context", model.max_context},
                                        {"policy", scheduler.default_policy()},
                                        {"chat_template", model.chat ? json(model.chat->source()) : json()}}})}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res, Endpoint::kCompletions);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res, Endpoint::kChat);
    });
    // Unknown routes get an OpenAI-style error body too (handlers fill their own errors).
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (res.body.empty())
        send_json(res, res.status,
                  error_body(fmt::format("no route {} {} (see GET /v1/models, POST /v1/completions, "
                                         "POST /v1/chat/completions, GET /health, GET /metrics)",
                                         req.method, req.path),
                             res.status == 404 ? "not_found_error" : "invalid_request_error"));
    });
    // Anything that escapes a handler is the server's fault; it answers 500 and goes on.
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_json(res, 500, error_body(what, "server_error"));
    });
  }

  void handle(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    ParsedRequest pr;
    try {
      json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded()) throw RequestError("the body is not valid JSON", "");
      pr = parse_request(body, endpoint, model, req.body);
      if (!pr.policy.empty()) {
        try {
          engine.check_policy(pr.policy);
        } catch (const Error& e) {
          throw RequestError(e.what(), "policy");
        }
      }
      const SchedulerMetrics load = scheduler.metrics();
      const int slots = options.max_running > 0 ? options.max_running : engine.max_sequences();
      if (load.running >= slots && load.waiting >= options.max_waiting)
        throw RequestError("the server is busy: every sequence is in use and " + std::to_string(load.waiting) +
                               " requests are waiting (--max-waiting " + std::to_string(options.max_waiting) +
                               "); retry later",
                           "", 503);
    } catch (const RequestError& e) {
      rejected += 1;
      const char* type = e.status == 404 ? "not_found_error" : e.status == 503 ? "server_busy" : "invalid_request_error";
      send_json(res, e.status, error_body(e.what(), type, e.param));
      return;
    }
    const std::string id = std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const std::string policy = pr.policy.empty() ? scheduler.default_policy() : pr.policy;
    if (pr.stream)
      stream(res, endpoint, id, std::move(pr));
    else
      complete(res, endpoint, id, std::move(pr), policy);
  }

  // The n choices of a request: the same prompt, seeds seed + i.
  GenerationRequest choice_request(const ParsedRequest& pr, int i) const {
    GenerationRequest r = pr.request;
    r.sampling.seed += uint64_t(i);
    return r;
  }

  void complete(httplib::Response& res, Endpoint endpoint, const std::string& id, ParsedRequest pr,
                const std::string& policy) {
    std::vector<std::future<Outcome>> outcomes;
    for (int i = 0; i < pr.n; ++i) {
      auto done = std::make_shared<std::promise<Outcome>>();
      outcomes.push_back(done->get_future());
      RequestCallbacks cb;
      cb.on_done = [done](const GenerationResult& r) { done->set_value({true, r, ""}); };
      cb.on_error = [done](const std::string& m) { done->set_value({false, {}, m}); };
      scheduler.submit(choice_request(pr, i), pr.policy, std::move(cb));
    }
    std::vector<GenerationResult> results;
    std::string error;
    for (auto& f : outcomes) {
      Outcome o = f.get();
      if (!o.ok && error.empty()) error = o.error;
      results.push_back(std::move(o.result));
    }
    if (error.empty())
      send_json(res, 200,
                completion_response(endpoint, id, unix_seconds(), model.name, results, policy, pr, *model.tokenizer));
    else
      send_json(res, 500, error_body(error, "server_error"));
  }

  // Every choice streams its chunks (choices[0].index tells them apart); the last choice to
  // finish adds the usage of all and [DONE].
  void stream(httplib::Response& res, Endpoint endpoint, const std::string& id, ParsedRequest pr) {
    auto q = std::make_shared<EventQueue>();
    const int64_t created = unix_seconds();
    const std::string name = model.name;
    const int top_n = pr.request.logprobs;
    const Tokenizer* tok = model.tokenizer;
    struct Totals {  // worker thread only
      int left = 0, generated = 0;
    };
    auto totals = std::make_shared<Totals>(Totals{pr.n, 0});
    auto ids = std::make_shared<std::vector<uint64_t>>();
    std::vector<RequestCallbacks> cbs;
    for (int i = 0; i < pr.n; ++i) {
      auto first = std::make_shared<bool>(true);  // worker thread only
      auto offset = std::make_shared<size_t>(pr.echo ? pr.prompt_text.size() : 0);
      if (pr.echo) {  // the prompt first, as its own piece
        q->push(sse(stream_chunk(endpoint, id, created, name, pr.prompt_text, "", true, nullptr, i)), false);
        *first = false;
      }
      RequestCallbacks cb;
      cb.on_text = [=](std::string_view text, std::span<const TokenLogprob> lps) {
        const json lp = top_n >= 0 ? stream_logprobs(endpoint, lps, top_n, *tok, *offset) : json();
        q->push(sse(stream_chunk(endpoint, id, created, name, std::string(text), "", *first, lp, i)), false);
        *first = false;
      };
      cb.on_done = [=](const GenerationResult& r) {
        json last = stream_chunk(endpoint, id, created, name, "", r.stats.finish_reason, *first, nullptr, i);
        totals->generated += r.stats.generated_tokens;
        if (--totals->left > 0) return q->push(sse(last), false);
        last["usage"] = {{"prompt_tokens", r.stats.prompt_tokens},
                         {"completion_tokens", totals->generated},
                         {"total_tokens", r.stats.prompt_tokens + totals->generated}};
        q->push(sse(last) + "data: [DONE]\n\n", true);
      };
      cb.on_error = [=](const std::string& m) { q->push(sse(error_body(m, "server_error")), true); };
      cbs.push_back(std::move(cb));
    }
    for (int i = 0; i < pr.n; ++i) ids->push_back(scheduler.submit(choice_request(pr, i), pr.policy, std::move(cbs[size_t(i)])));
    Scheduler* sched = &scheduler;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [q, sched, ids](size_t, httplib::DataSink& sink) {
          std::unique_lock<std::mutex> lk(q->mu);
          q->cv.wait(lk, [&] { return !q->events.empty() || q->finished; });
          std::deque<std::string> events;
          events.swap(q->events);
          const bool finished = q->finished;
          lk.unlock();
          for (const std::string& e : events)
            if (!sink.write(e.data(), e.size())) {  // the client went away
              for (uint64_t rid : *ids) sched->cancel(rid);
              return false;
            }
          if (finished) sink.done();
          return true;
        },
        [sched, ids, q](bool success) {
          if (!success)
            for (uint64_t rid : *ids) sched->cancel(rid);
        });
  }

  std::string metrics_text() const {
    const SchedulerMetrics m = scheduler.metrics();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double value) {
      out += fmt::format("# HELP skim_{} {}\n# TYPE skim_{} {}\nskim_{} {}\n", name, help, name, type, name, value);
    };
    metric("requests_finished_total", "counter", "requests that finished (stop or length)", double(m.requests_finished));
    metric("requests_failed_total", "counter", "requests that failed in the engine", double(m.requests_failed));
    metric("requests_cancelled_total", "counter", "requests whose client went away", double(m.requests_cancelled));
    metric("requests_rejected_total", "counter", "requests refused before queueing (invalid, unauthorised, busy)",
           double(rejected.load()));
    metric("prompt_tokens_total", "counter", "prompt tokens prefilled", double(m.prompt_tokens));
    metric("generated_tokens_total", "counter", "tokens generated", double(m.generated_tokens));
    metric("decode_steps_total", "counter", "batched decode steps", double(m.decode_steps));
    metric("policy_switches_total", "counter", "engine policy switches for per-request policies", double(m.policy_switches));
    metric("prefill_seconds_total", "counter", "time spent in prefill", m.prefill_seconds);
    metric("decode_seconds_total", "counter", "time spent in decode steps", m.decode_seconds);
    metric("prefix_cache_hits_total", "counter", "prompts started from a cached prefix", double(m.prefix_hits));
    metric("prefix_cache_tokens_total", "counter", "prompt tokens not prefilled thanks to the prefix cache",
           double(m.prefix_tokens_reused));
    metric("requests_running", "gauge", "requests holding a sequence (prefilling or decoding)", double(m.running));
    metric("requests_waiting", "gauge", "requests queued for a free sequence", double(m.waiting));
    return out;
  }
};

Server::Server(Engine& engine, ServerOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {}
Server::~Server() { stop(); }

void Server::bind() {
  Impl& m = *impl_;
  if (m.options.port == 0) {
    m.port = m.http.bind_to_any_port(m.options.host);
  } else {
    m.port = m.http.bind_to_port(m.options.host, m.options.port) ? m.options.port : -1;
  }
  SKIM_REQUIRE(m.port > 0, "cannot listen on {}:{} (--host, --port): address in use or not available",
               m.options.host, m.options.port);
}

int Server::bound_port() const { return impl_->port; }

void Server::listen() {
  SKIM_REQUIRE(impl_->port > 0, "Server::listen before bind");
  impl_->http.listen_after_bind();
}

void Server::stop() { impl_->http.stop(); }

}  // namespace skim::server
