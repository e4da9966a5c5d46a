// skim serve: the OpenAI-compatible HTTP server (src/server) on one engine, until SIGINT or
// SIGTERM; then it drains (new requests get 503, those in flight finish within
// --drain-timeout or end with finish_reason "abort") and exits. A second signal exits at once.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "engine/field_checks.h"
#ifdef SKIM_HAVE_SERVER
#include <unistd.h>

#include "server/server.h"
#endif

namespace skim::cli {

namespace {
#ifdef SKIM_HAVE_SERVER
// SIGINT/SIGTERM may land on any thread (OpenBLAS starts its own before main), so the handler
// only writes a byte to a pipe; a thread reading the pipe drains the server. A second signal
// exits at once (from the handler: _exit is async-signal-safe).
int stop_pipe[2] = {-1, -1};
volatile sig_atomic_t signals_seen = 0;
extern "C" void on_stop_signal(int) {
  signals_seen = signals_seen + 1;
  if (signals_seen > 1) _exit(130);
  const char b = 1;
  [[maybe_unused]] ssize_t n = write(stop_pipe[1], &b, 1);
}
#endif

struct ServeArgs {
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string name;
  std::string api_key;
  int64_t max_waiting = 64;
  int64_t prefix_cache = 0;
  int64_t max_body = int64_t(8) << 20;
  double request_timeout = 30;
  double drain_timeout = 30;
  int64_t http_threads = 0;
  std::string chat_template;
};

#ifdef SKIM_HAVE_SERVER
void check_serve_args(const ServeArgs& a) {
  check_int(IntField{"--port", 0, 65535}, a.port);
  check_int(IntField{"--max-waiting", 0, 100000}, a.max_waiting);
  check_int(IntField{"--prefix-cache", 0, fields::kMaxSequences.hi}, a.prefix_cache);
  check_int(IntField{"--max-body", 1024, int64_t(1) << 30}, a.max_body);
  check_int(IntField{"--http-threads", 0, 4096}, a.http_threads);
  check_real(RealField{"--request-timeout", 0.1, 3600}, a.request_timeout);
  check_real(RealField{"--drain-timeout", 0, 3600}, a.drain_timeout);
  check_int(fields::kMaxSequences, a.engine.max_sequences);
  check_int(fields::kMaxSequences, a.engine.max_sequences + a.prefix_cache);
}

std::chrono::milliseconds millis(double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); }

void serve(ServeArgs& a) {
  check_serve_args(a);
  const int parallel = a.engine.max_sequences;
  a.engine.max_sequences = parallel + int(a.prefix_cache);  // the cached prompts hold sequences too
  if (a.prefix_cache > 0 && a.engine.prefill_chunk == 0) a.engine.prefill_chunk = kPrefixCachePrefillChunk;
  if (a.api_key.empty())
    if (const char* k = std::getenv("SKIM_API_KEY")) a.api_key = k;
  if (a.engine.model_dir.empty()) a.engine.model_dir = default_model_dir();
  Engine engine(a.engine);
  if (const std::string note = host_kv_dense_note(a.engine); !note.empty())
    std::fprintf(stderr, "skim serve: %s\n", note.c_str());
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.model_dir = a.engine.model_dir;
  so.chat_template_file = a.chat_template;
  so.model_name = a.name.empty() ? std::filesystem::absolute(a.engine.model_dir).filename().string() : a.name;
  if (so.model_name.empty()) so.model_name = "skim";
  so.http_threads = int(a.http_threads);
  so.max_body = size_t(a.max_body);
  so.request_timeout = millis(a.request_timeout);
  so.api_key = a.api_key;
  so.max_waiting = int(a.max_waiting);
  so.max_running = parallel;
  so.prefix_cache = int(a.prefix_cache);
  server::Server server(engine, so);
  server.bind();
  const std::string device = a.engine.tensor_parallel > 1
                                 ? fmt::format("{}, tensor parallel {}", a.engine.device, a.engine.tensor_parallel)
                                 : a.engine.device;
  std::fprintf(stderr, "skim serve: %s on http://%s:%d (policy %s, %d sequences x %d tokens, %s)\n",
               so.model_name.c_str(), so.host.c_str(), server.bound_port(), a.engine.policy.c_str(), parallel,
               a.engine.max_context, device.c_str());
  SKIM_REQUIRE(pipe(stop_pipe) == 0, "skim serve: cannot create a pipe");
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const auto grace = millis(a.drain_timeout);
  std::thread waiter([&] {
    char b = 0;
    if (read(stop_pipe[0], &b, 1) == 1 && b == 1) {
      std::fprintf(stderr, "skim serve: draining (up to %.0f s; a second signal exits now)\n", a.drain_timeout);
      server.drain(grace);
    } else {
      server.stop();
    }
  });
  server.listen();
  const char b = 2;  // listen ended another way: release the waiter (no-op if it is done)
  [[maybe_unused]] ssize_t n = write(stop_pipe[1], &b, 1);
  waiter.join();
  std::fprintf(stderr, "skim serve: stopped\n");
}
#endif
}  // namespace

void register_serve(CLI::App& root, std::function<void()>& run) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* app = root.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_engine_flags(*app, args->engine);
  args->engine.max_sequences = 4;
  app->add_option("--parallel", args->engine.max_sequences,
                  "sequences decoded together (each holds --ctx tokens of KV)")
      ->capture_default_str();
  app->add_option("--host", args->host, "address to listen on")->capture_default_str();
  app->add_option("--port", args->port, "port (0: any free one, printed at start)")->capture_default_str();
  app->add_option("--name,--served-model-name", args->name, "model name served (default: the model directory's name)");
  app->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: $SKIM_API_KEY)");
  app->add_option("--max-waiting", args->max_waiting, "queued requests beyond --parallel before refusing (503)")
      ->capture_default_str();
  app->add_option("--prefix-cache", args->prefix_cache,
                  "finished prompts kept for reuse by prompts that start with them (each holds up to --ctx tokens of KV; CPU)")
      ->capture_default_str();
  app->add_option("--max-body", args->max_body, "largest request body, bytes (413 beyond)")->capture_default_str();
  app->add_option("--request-timeout", args->request_timeout,
                  "seconds a client has to send a whole request (headers and body; 408 beyond)")
      ->capture_default_str();
  app->add_option("--drain-timeout", args->drain_timeout,
                  "on SIGTERM/SIGINT: seconds requests in flight may run before they are ended (finish_reason abort)")
      ->capture_default_str();
  app->add_option("--http-threads", args->http_threads,
                  "connections served at once (0: --parallel + --max-waiting + 16)")
      ->capture_default_str();
  app->add_option("--chat-template", args->chat_template, "a Jinja chat template file instead of the model's")
      ->check(CLI::ExistingFile);
  app->callback([args, &run] {
    run = [args] {
#ifndef SKIM_HAVE_SERVER
      fail("skim serve: this skim was built without the HTTP server (install libcpp-httplib-dev and "
           "re-run cmake)");
#else
      serve(*args);
#endif
    };
  });
}

}  // namespace skim::cli
