// What stands between a client's socket and cpp-httplib, so that no client can crash the
// server, starve the others of workers, or get a misleading answer:
//
//   - every connection serves one request (Connection: close), so each request starts on a
//     fresh connection and passes the gate below (httplib's own connection loop is replaced:
//     its socket stream has no deadline for a whole request);
//   - the gate reads the request head (peeking, before httplib parses it) and refuses, each
//     with its own status and an OpenAI error body: a request line over the URI limit (414),
//     a head over its limit (431), a bad or duplicated Content-Length or one beside
//     Transfer-Encoding (400), a body over --max-body (413), a compressed body (415), a form
//     body over the HTTP layer's 8 KB form limit (415, naming the JSON content type);
//   - the whole request (head and body) must arrive within the request timeout (408);
//   - a bounded pool of workers serves connections, newest first; when every worker is busy,
//     the connection that has been reading its request longest is cut (a slow client yields
//     to a new one, which takes its worker);
//   - a handler can ask whether its client has hung up (client_gone), to cancel work nobody
//     will read.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace skim::server {

struct GuardLimits {
  size_t max_body = size_t(8) << 20;  // bytes of a request body (--max-body)
  size_t max_head = size_t(16) << 10;  // request line and headers
  size_t max_uri = 8192;               // the request target
  std::chrono::milliseconds request_timeout{30000};  // to receive a whole request
  int threads = 64;                    // workers: connections served at once
};

// The JSON error body the server answers with (OpenAI's shape); shared with the handlers.
std::string error_json(const std::string& message, const std::string& type, const std::string& param = "");

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const GuardLimits& limits);
  ~GuardedHttpServer() override;

  // The request of this worker's connection has been read whole (call first thing in the
  // pre-routing handler): its deadline stops applying, and the connection is no longer cut
  // to make room.
  static void request_received();
  // Whether the client of this worker's connection has closed it (or reset it).
  static bool client_gone();
  // Whether this worker's request failed to arrive within the request timeout (for the
  // error handler: 408 instead of 400).
  static bool request_timed_out();

  const GuardLimits& limits() const { return limits_; }
  uint64_t connections_cut() const;    // slow or evicted readers
  uint64_t connections_refused() const;  // gate refusals

  struct Registry;  // (the live connections; in the .cpp)
  class Pool;

 private:
  bool process_and_close_socket(socket_t sock) override;
  GuardLimits limits_;
  std::shared_ptr<Registry> registry_;
};

}  // namespace skim::server
