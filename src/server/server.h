// skim serve: an OpenAI-compatible HTTP server over one engine (cpp-httplib).
//
//   POST /v1/completions, /v1/chat/completions   (JSON, or server-sent events with "stream")
//   GET  /v1/models, /health, /metrics (Prometheus text)
//
// Requests go through a Scheduler (continuous batching, per-request `policy`). A request that
// fails gets its error as JSON (400 for the request's fault, naming the field; 500 for the
// engine's); the server goes on.
#pragma once

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
  int http_threads = 16;         // connections served at once (streams hold one each)
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace skim::server
