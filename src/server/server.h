// skim serve: an OpenAI-compatible HTTP server over one engine (cpp-httplib).
//
//   POST /v1/completions, /v1/chat/completions   (JSON, or server-sent events with "stream")
//   GET  /v1/models, /health, /metrics (Prometheus text)
//
// Also POST /tokenize and /detokenize (llama.cpp's shapes) and GET /v1/models/{id}.
//
// Requests go through a Scheduler (continuous batching, per-request `policy`). A request that
// fails gets its error as JSON (4xx for the request's fault, naming the field; 500 for the
// engine's); the server goes on. The HTTP layer (http_guard.h) bounds what a client controls:
// body size, head size, the time to send a request, connections held.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

#include "skim/engine.h"

namespace skim::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (see bound_port)
  std::string model_name;        // what /v1/models lists and requests may name
  std::filesystem::path model_dir;  // its chat template (chat_template.jinja, tokenizer_config.json)
  std::filesystem::path chat_template_file;  // a Jinja chat template instead of the model's
  int http_threads = 0;          // connections served at once (0: running + waiting + 16, so
                                 // that requests in flight never hold every worker)
  size_t max_body = size_t(8) << 20;  // request body bytes (413 beyond)
  std::chrono::milliseconds request_timeout{30000};  // to receive a whole request
  std::string api_key;           // when set, /v1/* needs "Authorization: Bearer <api_key>"
  int max_waiting = 64;          // requests queued beyond --parallel; more are refused (503)
  int max_running = 0;           // sequences decoding at once (0: all the engine's)
  int prefix_cache = 0;          // prompts kept for reuse (the engine needs max_running + these)
};

class Server {
 public:
  Server(Engine& engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the socket; throws skim::Error naming the address when it cannot.
  void bind();
  int bound_port() const;
  // Serves until stop() (from another thread or a signal handler's thread).
  void listen();
  void stop();
  // Stops taking requests (new ones get 503), lets those in flight finish for up to `grace`,
  // ends the rest cleanly (finish_reason "abort", streams closed with [DONE]), then stops.
  void drain(std::chrono::milliseconds grace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace skim::server
