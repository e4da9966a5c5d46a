// skim serve: the OpenAI-compatible HTTP server (src/server) on one engine, until SIGINT or
// SIGTERM; then in-flight requests finish and it exits.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#ifdef SKIM_HAVE_SERVER
#include <unistd.h>

#include "server/server.h"
#endif

namespace skim::cli {

namespace {
#ifdef SKIM_HAVE_SERVER
// SIGINT/SIGTERM may land on any thread (OpenBLAS starts its own before main), so the handler
// only writes a byte to a pipe; a thread reading the pipe stops the server.
int stop_pipe[2] = {-1, -1};
extern "C" void on_stop_signal(int) {
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
  int max_waiting = 64;
  int prefix_cache = 0;
  std::string chat_template;
};
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
  app->add_option("--name", args->name, "model name served (default: the model directory's name)");
  app->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: $SKIM_API_KEY)");
  app->add_option("--max-waiting", args->max_waiting, "queued requests beyond --parallel before refusing (503)")
      ->capture_default_str();
  app->add_option("--prefix-cache", args->prefix_cache,
                  "finished prompts kept for reuse by prompts that start with them (each holds up to --ctx tokens of KV; CPU)")
      ->capture_default_str();
  app->add_option("--chat-template", args->chat_template, "a Jinja chat template file instead of the model's")
      ->check(CLI::ExistingFile);
  app->callback([args, &run] {
    run = [args] {
#ifndef SKIM_HAVE_SERVER
      fail("skim serve: this skim was built without the HTTP server (install libcpp-httplib-dev and "
           "re-run cmake)");
#else
      ServeArgs& a = *args;
      SKIM_REQUIRE(a.port >= 0 && a.port <= 65535, "--port must be in [0, 65535], got {}", a.port);
      SKIM_REQUIRE(a.max_waiting >= 0, "--max-waiting must be >= 0, got {}", a.max_waiting);
      SKIM_REQUIRE(a.prefix_cache >= 0, "--prefix-cache must be >= 0, got {}", a.prefix_cache);
      SKIM_REQUIRE(a.prefix_cache == 0 || a.engine.device == "cpu",
                   "--prefix-cache: the GPU engine cannot copy sequences yet (drop it, or --device cpu)");
      const int parallel = a.engine.max_sequences;
      a.engine.max_sequences = parallel + a.prefix_cache;  // the cached prompts hold sequences too
      if (a.api_key.empty())
        if (const char* k = std::getenv("SKIM_API_KEY")) a.api_key = k;
      if (a.engine.model_dir.empty()) a.engine.model_dir = default_model_dir();
      Engine engine(a.engine);
      server::ServerOptions so;
      so.host = a.host;
      so.port = a.port;
      so.model_dir = a.engine.model_dir;
      so.chat_template_file = a.chat_template;
      so.model_name = a.name.empty() ? std::filesystem::absolute(a.engine.model_dir).filename().string() : a.name;
      if (so.model_name.empty()) so.model_name = "skim";
      so.http_threads = std::max(16, 2 * a.engine.max_sequences);
      so.api_key = a.api_key;
      so.max_waiting = a.max_waiting;
      so.max_running = parallel;
      so.prefix_cache = a.prefix_cache;
      server::Server server(engine, so);
      server.bind();
      std::fprintf(stderr, "skim serve: %s on http://%s:%d (policy %s, %d sequences x %d tokens, %s)\n",
                   so.model_name.c_str(), so.host.c_str(), server.bound_port(), a.engine.policy.c_str(),
                   parallel, a.engine.max_context, a.engine.device.c_str());
      SKIM_REQUIRE(pipe(stop_pipe) == 0, "skim serve: cannot create a pipe");
      struct sigaction sa = {};
      sa.sa_handler = on_stop_signal;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGINT, &sa, nullptr);
      sigaction(SIGTERM, &sa, nullptr);
      std::thread waiter([&] {
        char b = 0;
        if (read(stop_pipe[0], &b, 1) == 1 && b == 1) std::fprintf(stderr, "skim serve: stopping\n");
        server.stop();
      });
      server.listen();
      on_stop_signal(0);  // listen ended another way: release the waiter (no-op if it is done)
      waiter.join();
#endif
    };
  });
}

}  // namespace skim::cli
