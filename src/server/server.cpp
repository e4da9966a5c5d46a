#include "server/server.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "engine/scheduler.h"
#include "model/config.h"
#include "server/http_guard.h"
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

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "") {
  const char* type = status == 401   ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status == 503 ? "server_busy"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  if (status == 503) res.set_header("Retry-After", "1");
  send_json(res, status, error_body(message, type, param));
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }
const std::string kDone = "data: [DONE]\n\n";

// Ids unique across restarts too ("cmpl-" and 24 hex digits), as OpenAI's are.
std::string new_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lk(mu);
  const uint64_t a = rng(), b = rng();
  return fmt::format("{}{:016x}{:08x}", prefix, a, uint32_t(b));
}

// The "Bearer" scheme is case-insensitive (RFC 7235); the key is not.
bool bearer_matches(const std::string& header, const std::string& key) {
  constexpr std::string_view scheme = "bearer ";
  if (header.size() != scheme.size() + key.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != scheme[i]) return false;
  return header.compare(scheme.size(), std::string::npos, key) == 0;
}

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

// How often a handler waiting on the engine looks whether its client is still there.
constexpr auto kClientCheck = std::chrono::milliseconds(100);

// The methods each route answers, for 405's Allow header.
const std::map<std::string, std::string>& route_methods() {
  static const std::map<std::string, std::string> m = {
      {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}, {"/tokenize", "POST"}, {"/detokenize", "POST"},
      {"/v1/models", "GET"},       {"/health", "GET"},                {"/metrics", "GET"}};
  return m;
}

std::string allowed_methods(const std::string& path) {
  if (auto it = route_methods().find(path); it != route_methods().end()) return it->second;
  if (path.rfind("/v1/models/", 0) == 0) return "GET";
  return "";
}

// The message of an error httplib answered on its own (no handler ran).
std::string transport_error(int status, const httplib::Request& req, size_t max_body) {
  switch (status) {
    case 400: return "malformed HTTP request";
    case 413: return fmt::format("the body exceeds {} bytes (skim serve --max-body)", max_body);
    case 414: return "the request target is too long";
    case 415: return "unsupported Content-Encoding or Content-Type; send the JSON uncompressed as application/json";
    case 431: return "the request headers are too large";
    default:
      return fmt::format("no route {} {} (see GET /v1/models, POST /v1/completions, POST /v1/chat/completions, "
                         "POST /tokenize, POST /detokenize, GET /health, GET /metrics)",
                         req.method, req.path);
  }
}

}  // namespace

struct Server::Impl {
  Engine& engine;
  ServerOptions options;
  ServedModel model;
  Scheduler scheduler;
  GuardedHttpServer http;
  const int64_t started = unix_seconds();
  int port = -1;
  std::atomic<uint64_t> rejected{0};   // answered 4xx/503 before reaching the scheduler
  std::atomic<uint64_t> abandoned{0};  // non-streamed requests whose client hung up
  std::atomic<int> in_flight{0};       // generation requests not yet answered in full
  std::atomic<bool> draining{false};

  static GuardLimits limits_of(const ServerOptions& o, const Engine& e) {
    GuardLimits l;
    l.max_body = o.max_body;
    l.request_timeout = o.request_timeout;
    const int running = o.max_running > 0 ? o.max_running : e.max_sequences();
    l.threads = o.http_threads > 0 ? o.http_threads : running + o.max_waiting + 16;
    return l;
  }

  Impl(Engine& e, ServerOptions o)
      : engine(e),
        options(std::move(o)),
        scheduler(e, SchedulerOptions{options.max_running, options.prefix_cache}),
        http(limits_of(options, e)) {
    model.name = options.model_name;
    model.tokenizer = &e.tokenizer();
    if (!options.chat_template_file.empty())
      model.chat = std::make_shared<const ChatTemplate>(ChatTemplate::from_file(options.chat_template_file, options.model_dir));
    else if (auto t = ChatTemplate::from_model_dir(options.model_dir))
      model.chat = std::make_shared<const ChatTemplate>(std::move(*t));
    model.max_context = e.max_context();
    for (int id = 0; id < model.tokenizer->vocab_size(); ++id)
      model.max_token_bytes = std::max(model.max_token_bytes, int(model.tokenizer->token_bytes(id).size()));
    routes();
  }

  json model_object() const {
    return {{"id", model.name},
            {"object", "model"},
            {"created", started},
            {"owned_by", "skim"},
            {"max_context", model.max_context},
            {"policy", scheduler.default_policy()},
            {"chat_template", model.chat ? json(model.chat->source()) : json()}};
  }

  // Runs first for every request once httplib has read it whole: the request is in (its
  // deadline stops), the server may be draining, and /v1/* may need the API key.
  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res) {
    GuardedHttpServer::request_received();
    const bool api = req.path.rfind("/v1/", 0) == 0;
    if (draining && (api || req.path == "/tokenize" || req.path == "/detokenize" || req.path == "/health")) {
      send_error(res, 503, "the server is shutting down");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options.api_key.empty() || !api || bearer_matches(req.get_header_value("Authorization"), options.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    rejected += 1;
    send_error(res, 401, "missing or wrong API key (Authorization: Bearer ...)");
    return httplib::Server::HandlerResponse::Handled;
  }

  void routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) { return pre_route(req, res); });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"status", "ok"}}); });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"object", "list"}, {"data", json::array({model_object()})}});
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] == model.name) return send_json(res, 200, model_object());
      send_error(res, 404, fmt::format("model '{}' is not served here; this server serves '{}'", std::string(req.matches[1]), model.name),
                 "model");
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
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { answer(res, [&] { return tokenize(req); }); });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { answer(res, [&] { return detokenize(req); }); });
    // Errors httplib answered itself (no handler ran), and unknown routes or methods: an
    // OpenAI-style body that says what happened.
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (GuardedHttpServer::request_timed_out())
        return send_error(res, 408, fmt::format("the request did not arrive within {} ms (skim serve --request-timeout)",
                                                options.request_timeout.count()));
      if (res.status == 404)
        if (const std::string allow = allowed_methods(req.path); !allow.empty()) {
          res.set_header("Allow", allow);
          return send_error(res, 405, fmt::format("{} {}: method not allowed (use {})", req.method, req.path, allow));
        }
      send_error(res, res.status, transport_error(res.status, req, options.max_body));
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
      send_error(res, 500, what);
    });
  }

  // A handler whose request errors are RequestErrors.
  template <class F>
  void answer(httplib::Response& res, F&& make) {
    try {
      send_json(res, 200, make());
    } catch (const RequestError& e) {
      rejected += 1;
      send_error(res, e.status, e.what(), e.param);
    }
  }

  // llama.cpp's /tokenize: {"content": text, "add_special": false, "with_pieces": false}.
  json tokenize(const httplib::Request& req) {
    const json body = parse_body(req.body);
    if (!body.is_object() || !body.contains("content") || !body["content"].is_string())
      throw RequestError("content: required, a string", "content");
    const json& add = body.contains("add_special") ? body["add_special"] : json(false);
    const json& pieces = body.contains("with_pieces") ? body["with_pieces"] : json(false);
    if (!add.is_boolean()) throw RequestError("add_special: must be true or false", "add_special");
    if (!pieces.is_boolean()) throw RequestError("with_pieces: must be true or false", "with_pieces");
    const std::string& text = body["content"].get_ref<const std::string&>();
    const std::vector<int> ids = add.get<bool>() ? model.tokenizer->encode_prompt(text) : model.tokenizer->encode(text);
    json tokens = json::array();
    for (int id : ids)
      tokens.push_back(pieces.get<bool>() ? json{{"id", id}, {"piece", model.tokenizer->token_bytes(id)}} : json(id));
    return {{"tokens", tokens}};
  }

  // llama.cpp's /detokenize: {"tokens": [ids]} -> {"content": text}.
  json detokenize(const httplib::Request& req) {
    const json body = parse_body(req.body);
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
      throw RequestError("tokens: required, a list of token ids", "tokens");
    const int64_t vocab = model.tokenizer->vocab_size();
    std::vector<int> ids;
    for (const json& x : body["tokens"]) {
      const bool ok = x.is_number_integer() && !(x.is_number_unsigned() && x.get<uint64_t>() >= uint64_t(vocab)) &&
                      x.get<int64_t>() >= 0 && x.get<int64_t>() < vocab;
      if (!ok) throw RequestError(fmt::format("tokens: each must be a token id in [0, {}]", vocab - 1), "tokens");
      ids.push_back(x.get<int>());
    }
    return {{"content", model.tokenizer->decode(ids)}};
  }

  void handle(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    ParsedRequest pr;
    try {
      pr = parse_request(parse_body(req.body), endpoint, model, req.body);
      if (!pr.policy.empty()) {
        try {
          engine.check_policy(pr.policy);
        } catch (const Error& e) {
          throw RequestError(std::string("policy: ") + e.what(), "policy");
        }
      }
      const SchedulerMetrics load = scheduler.metrics();
      const int slots = options.max_running > 0 ? options.max_running : engine.max_sequences();
      if (load.running >= slots && load.waiting >= options.max_waiting)
        throw RequestError(fmt::format("the server is busy: every sequence is in use and {} requests are waiting; "
                                       "retry later",
                                       load.waiting),
                           "", 503);
    } catch (const RequestError& e) {
      rejected += 1;
      send_error(res, e.status, e.what(), e.param);
      return;
    }
    const std::string id = new_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
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

  // Waits for every choice; a client that hangs up meanwhile (queued or decoding) cancels them.
  void complete(httplib::Response& res, Endpoint endpoint, const std::string& id, ParsedRequest pr,
                const std::string& policy) {
    in_flight += 1;
    std::vector<std::future<Outcome>> outcomes;
    std::vector<uint64_t> ids;
    for (int i = 0; i < pr.n; ++i) {
      auto done = std::make_shared<std::promise<Outcome>>();
      outcomes.push_back(done->get_future());
      RequestCallbacks cb;
      cb.on_done = [done](const GenerationResult& r) { done->set_value({true, r, ""}); };
      cb.on_error = [done](const std::string& m) { done->set_value({false, {}, m}); };
      ids.push_back(scheduler.submit(choice_request(pr, i), pr.policy, std::move(cb)));
    }
    std::vector<GenerationResult> results;
    std::string error;
    bool gone = false;
    for (auto& f : outcomes) {
      while (!gone && f.wait_for(kClientCheck) != std::future_status::ready) gone = GuardedHttpServer::client_gone();
      if (gone) break;
      Outcome o = f.get();
      if (!o.ok && error.empty()) error = o.error;
      results.push_back(std::move(o.result));
    }
    if (gone) {  // nobody will read the answer
      for (uint64_t rid : ids) scheduler.cancel(rid);
      abandoned += 1;
    } else if (!error.empty()) {
      send_error(res, draining ? 503 : 500, draining ? "the server is shutting down" : error);
    } else {
      send_json(res, 200, completion_response(endpoint, id, unix_seconds(), model.name, results, policy, pr, *model.tokenizer));
    }
    in_flight -= 1;
  }

  // Every choice streams its chunks (choices[0].index tells them apart); the last choice to
  // finish ends the stream: its usage (a chunk of its own with stream_options.include_usage)
  // and [DONE].
  void stream(httplib::Response& res, Endpoint endpoint, const std::string& id, ParsedRequest pr) {
    in_flight += 1;
    auto q = std::make_shared<EventQueue>();
    const int64_t created = unix_seconds();
    const std::string name = model.name;
    const int top_n = pr.request.logprobs;
    const bool include_usage = pr.include_usage;
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
        std::string out = sse(stream_chunk(endpoint, id, created, name, "", r.stats.finish_reason, *first, nullptr, i));
        totals->generated += r.stats.generated_tokens;
        if (--totals->left > 0) return q->push(out, false);
        if (include_usage) {
          json usage = stream_chunk(endpoint, id, created, name, "", "", false, nullptr, 0);
          usage["choices"] = json::array();
          usage["usage"] = {{"prompt_tokens", r.stats.prompt_tokens},
                            {"completion_tokens", totals->generated},
                            {"total_tokens", r.stats.prompt_tokens + totals->generated}};
          out += sse(usage);
        }
        q->push(out + kDone, true);
      };
      cb.on_error = [=](const std::string& m) { q->push(sse(error_body(m, "server_error")) + kDone, true); };
      cbs.push_back(std::move(cb));
    }
    for (int i = 0; i < pr.n; ++i) ids->push_back(scheduler.submit(choice_request(pr, i), pr.policy, std::move(cbs[size_t(i)])));
    Scheduler* sched = &scheduler;
    std::atomic<int>* flight = &in_flight;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [q, sched, ids](size_t, httplib::DataSink& sink) {
          std::unique_lock<std::mutex> lk(q->mu);
          // Waits for events, looking now and then whether the client is still there (a long
          // prefill or a queue sends nothing for a while).
          while (!q->cv.wait_for(lk, kClientCheck, [&] { return !q->events.empty() || q->finished; }))
            if (GuardedHttpServer::client_gone()) {
              lk.unlock();
              for (uint64_t rid : *ids) sched->cancel(rid);
              return false;
            }
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
        [sched, ids, flight](bool success) {
          if (!success)
            for (uint64_t rid : *ids) sched->cancel(rid);
          *flight -= 1;
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
    metric("requests_cancelled_total", "counter", "generations cancelled because their client went away (streamed or not)",
           double(m.requests_cancelled));
    metric("requests_abandoned_total", "counter", "non-streamed requests whose client hung up before the answer",
           double(abandoned.load()));
    metric("requests_rejected_total", "counter", "requests refused before queueing (invalid, unauthorised, busy)",
           double(rejected.load()));
    metric("connections_cut_total", "counter", "connections cut for sending their request too slowly, or to make room",
           double(http.connections_cut()));
    metric("connections_refused_total", "counter", "connections refused at the HTTP layer (limits, malformed, timed out)",
           double(http.connections_refused()));
    metric("prompt_tokens_total", "counter", "prompt tokens prefilled", double(m.prompt_tokens));
    metric("generated_tokens_total", "counter", "tokens generated", double(m.generated_tokens));
    metric("decode_steps_total", "counter", "batched decode steps", double(m.decode_steps));
    metric("policy_switches_total", "counter", "engine policy switches for per-request policies", double(m.policy_switches));
    metric("rectified_tokens_total", "counter", "tokens ReSA's rectification re-ran", double(m.rectified_tokens));
    metric("rectification_passes_total", "counter",
           "forward passes rectification ran (sequences rectified together share one)", double(m.rectification_passes));
    metric("prefill_seconds_total", "counter", "time spent in prefill", m.prefill_seconds);
    metric("decode_seconds_total", "counter", "time spent in decode steps", m.decode_seconds);
    metric("prefix_cache_hits_total", "counter", "prompts started from a cached prefix", double(m.prefix_hits));
    metric("prefix_cache_tokens_total", "counter", "prompt tokens not prefilled thanks to the prefix cache",
           double(m.prefix_tokens_reused));
    metric("requests_running", "gauge", "requests holding a sequence (prefilling or decoding)", double(m.running));
    metric("requests_waiting", "gauge", "requests queued for a free sequence", double(m.waiting));
    metric("draining", "gauge", "1 while the server finishes its requests before exiting", draining ? 1.0 : 0.0);
    return out;
  }

  // Waits until no generation request is in flight, or the deadline.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) const {
    while (in_flight.load() > 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
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

void Server::drain(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  m.draining = true;
  const auto now = std::chrono::steady_clock::now();
  if (!m.wait_idle(now + grace)) {
    m.scheduler.end_all("abort");
    m.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
  }
  stop();
}

}  // namespace skim::server
