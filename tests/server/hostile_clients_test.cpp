// skim serve against hostile and careless clients (issue: "skim serve and the CLI hold against
// hostile and careless clients"). Each test is the regression test of one defect class: it
// failed on the server before the HTTP guard (src/server/http_guard.h) and the field checks
// (src/engine/field_checks.h), and the server must stay up after every one.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/server.h"
#include "skim/engine.h"

namespace skim::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

const fs::path kDemo = fs::path(SKIM_SOURCE_DIR) / "models/demo-code-28m";

// A server of its own per test, with short limits so that the tests run in seconds.
struct TestServer {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Server> server;
  std::thread thread;
  int port = 0;
  bool stopped = false;

  explicit TestServer(ServerOptions so = {}, int sequences = 2) {
    EngineOptions o;
    o.model_dir = kDemo;
    o.max_context = 512;
    o.max_sequences = sequences;
    o.prefill_chunk = 64;
    engine = std::make_unique<Engine>(o);
    so.port = 0;
    so.model_name = "demo";
    server = std::make_unique<Server>(*engine, so);
    server->bind();
    port = server->bound_port();
    thread = std::thread([this] { server->listen(); });
  }
  ~TestServer() {
    if (!stopped) server->stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
  int health() const {
    auto r = client().Get("/health");
    return r ? r->status : -1;
  }
  double metric(const std::string& name) const {
    auto r = client().Get("/metrics");
    const std::string key = "\nskim_" + name + " ";
    const size_t at = r->body.find(key);
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + key.size()));
  }
};

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& data) {
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;
    at += size_t(n);
  }
}

// Everything the server sends until it closes the connection (or the timeout).
std::string read_all(int fd, int timeout_ms = 10000) {
  std::string got;
  char buf[4096];
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

struct RawReply {
  int status = 0;
  std::string head, body;
};

RawReply parse_reply(const std::string& raw) {
  RawReply r;
  if (raw.rfind("HTTP/1.1 ", 0) == 0) r.status = std::stoi(raw.substr(9, 3));
  const size_t split = raw.find("\r\n\r\n");
  r.head = raw.substr(0, split);
  if (split != std::string::npos) r.body = raw.substr(split + 4);
  return r;
}

// Sends raw bytes as one request and reads the answer.
RawReply raw_request(int port, const std::string& bytes) {
  const int fd = connect_to(port);
  send_all(fd, bytes);
  RawReply r = parse_reply(read_all(fd));
  close(fd);
  return r;
}

std::string post_head(const std::string& path, size_t length, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(length) + "\r\n\r\n";
}

std::string nested_array(size_t depth, const std::string& core = "1") {
  return std::string(depth, '[') + core + std::string(depth, ']');
}

// Defect 1: a prompt (or chat content) nested 140,000 levels deep overflowed the stack.
TEST(HostileClients, DeeplyNestedJsonIsRefusedNotACrash) {
  TestServer s;
  for (const std::string& body : {"{\"prompt\": " + nested_array(140000) + "}",
                                  "{\"messages\": [{\"role\": \"user\", \"content\": " + nested_array(140000) + "}]}",
                                  "{\"prompt\": \"x\", \"extra\": " + nested_array(65) + "}"}) {
    const char* path = body.find("messages") != std::string::npos ? "/v1/chat/completions" : "/v1/completions";
    RawReply r = raw_request(s.port, post_head(path, body.size()) + body);
    EXPECT_EQ(r.status, 400) << r.head;
    EXPECT_NE(r.body.find("nests deeper than 64"), std::string::npos) << r.body;
  }
  EXPECT_EQ(s.health(), 200);
}

// Defect 2: 16 clients trickling one header line a second locked everyone out.
TEST(HostileClients, SlowClientsDoNotLockOthersOut) {
  ServerOptions so;
  so.http_threads = 8;  // fewer workers than slow clients: the slowest readers are cut
  so.request_timeout = std::chrono::milliseconds(3000);
  TestServer s(so);
  std::atomic<bool> stop{false};
  std::vector<int> slow;
  for (int i = 0; i < 16; ++i) slow.push_back(connect_to(s.port));
  std::thread trickler([&] {
    for (int line = 0; !stop; ++line) {
      for (int fd : slow) send_all(fd, line == 0 ? std::string("POST /v1/completions HTTP/1.1\r\n") : "X-Slow: 1\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // every worker holds a slow client
  const auto t0 = Clock::now();
  EXPECT_EQ(s.health(), 200);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));  // served: a slow reader made room
  // Past the request timeout, every slow client is cut (408 or closed).
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  stop = true;
  trickler.join();
  for (int fd : slow) {
    const std::string got = read_all(fd, 2000);
    EXPECT_TRUE(got.empty() || got.rfind("HTTP/1.1 408", 0) == 0) << got.substr(0, 80);
    close(fd);
  }
  EXPECT_GE(s.metric("connections_cut_total") + s.metric("connections_refused_total"), 1);
  EXPECT_EQ(s.health(), 200);
}

// Defect 3: a client that hangs up on a non-streamed request was never cancelled.
TEST(HostileClients, AbandonedNonStreamedRequestIsCancelled) {
  TestServer s;
  const std::string body = json{{"prompt", "def f(x):"}, {"max_tokens", 400}, {"ignore_eos", true}}.dump();
  const int fd = connect_to(s.port);
  send_all(fd, post_head("/v1/completions", body.size()) + body);
  // Running (or queued) now; the client leaves.
  for (int i = 0; i < 100 && s.metric("requests_running") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  close(fd);
  bool cancelled = false;
  for (int i = 0; i < 100 && !cancelled; ++i) {
    cancelled = s.metric("requests_cancelled_total") >= 1 && s.metric("requests_running") == 0;
    if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(s.metric("requests_abandoned_total"), 1);
  EXPECT_EQ(s.metric("requests_finished_total"), 0);  // it did not run its 400 tokens
}

// Defect 4: no body limit; a huge prompt was tokenised before the context check.
TEST(HostileClients, BodyLimitAndHugePromptsAreRefusedEarly) {
  ServerOptions so;
  so.max_body = 1 << 20;
  TestServer s(so);
  // Over --max-body: 413 from the head alone, before the body is read.
  RawReply r = raw_request(s.port, post_head("/v1/completions", 50u << 20) + "{\"prompt\": \"");
  EXPECT_EQ(r.status, 413) << r.head;
  EXPECT_NE(r.body.find("--max-body"), std::string::npos) << r.body;
  // Within it, but more bytes than the context could hold: refused without tokenising.
  const std::string body = json{{"prompt", std::string(900 << 10, 'x')}}.dump();
  const auto t0 = Clock::now();
  r = raw_request(s.port, post_head("/v1/completions", body.size()) + body);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("cannot fit this server's context"), std::string::npos) << r.body;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(s.health(), 200);
}

// Defect 5: SIGTERM cut running streams with no final chunk and no [DONE].
TEST(HostileClients, DrainEndsStreamsCleanly) {
  TestServer s;
  const std::string body = json{{"prompt", "def f(x):"}, {"max_tokens", 450}, {"ignore_eos", true}, {"stream", true}}.dump();
  const int fd = connect_to(s.port);
  send_all(fd, post_head("/v1/completions", body.size()) + body);
  for (int i = 0; i < 100 && s.metric("requests_running") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::thread drainer([&] { s.server->drain(std::chrono::milliseconds(300)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Draining: new work is refused with 503 and Retry-After.
  RawReply busy = raw_request(s.port, post_head("/v1/completions", 15) + "{\"prompt\": \"x\"}");
  EXPECT_EQ(busy.status, 503) << busy.head;
  EXPECT_NE(busy.head.find("Retry-After"), std::string::npos);
  const std::string stream = read_all(fd, 15000);
  close(fd);
  drainer.join();
  s.stopped = true;
  EXPECT_NE(stream.find("\"finish_reason\":\"abort\""), std::string::npos) << stream.substr(stream.size() > 400 ? stream.size() - 400 : 0);
  EXPECT_NE(stream.find("data: [DONE]"), std::string::npos);
}

// Defect 6: integers wrapped at 32 bits.
TEST(HostileClients, IntegersAreCheckedIn64Bits) {
  TestServer s;
  const uint64_t big = (uint64_t(1) << 32);
  struct Case {
    json body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"prompt", json::array({1, big + 5})}}, "prompt"},
      {{{"prompt", "x"}, {"max_tokens", big}}, "max_tokens"},
      {{{"prompt", "x"}, {"max_tokens", uint64_t(1) << 31}}, "max_tokens"},
      {{{"prompt", "x"}, {"n", big + 2}}, "n"},
      {{{"prompt", "x"}, {"top_k", big + 1}}, "top_k"},
      {{{"prompt", "x"}, {"seed", uint64_t(-1)}}, "seed"},
      {{{"prompt", "x"}, {"logprobs", big + 1}}, "logprobs"},
  };
  auto c = s.client();
  for (const Case& k : cases) {
    auto r = c.Post("/v1/completions", k.body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << k.body.dump() << " -> " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], k.param) << r->body;
    EXPECT_EQ(e["message"].get<std::string>().rfind(k.param + ": ", 0), 0u) << r->body;  // named once
  }
  auto r = c.Post("/v1/completions", json{{"prompt", "x"}, {"max_tokens", uint64_t(1) << 31}}.dump(), "application/json");
  EXPECT_NE(r->body.find("[0, 2147483647]"), std::string::npos) << r->body;
}

// Defect 7: transport errors answered "no route".
TEST(HostileClients, TransportErrorsGetTheirOwnStatus) {
  ServerOptions so;
  so.max_body = 1 << 20;
  TestServer s(so);
  struct Case {
    std::string bytes;
    int status;
    std::string says;
  };
  const std::string body = "{\"prompt\": \"x\"}";
  const std::vector<Case> cases = {
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n" + body, 400, "Content-Length"},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\nContent-Length: 16\r\n\r\n" + body, 400,
       "two different Content-Length"},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 << 10, 'a') + "\r\n\r\n", 431, "head"},
      {post_head("/v1/completions", body.size(), "Content-Encoding: gzip\r\n") + body, 415, "Content-Encoding: gzip"},
      {"GET /v1/models?" + std::string(100 << 10, 'q') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414, "request"},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
       "Content-Length: 10000\r\n\r\n" + std::string(10000, 'a'),
       415, "application/json"},
      {"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method not allowed"},
      {"DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method not allowed"},
      {"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404, "no route"},
      {"garbage\r\n\r\n", 400, "malformed"},
  };
  for (const Case& c : cases) {
    RawReply r = raw_request(s.port, c.bytes);
    EXPECT_EQ(r.status, c.status) << c.bytes.substr(0, 60) << "\n" << r.head;
    EXPECT_NE(r.body.find(c.says), std::string::npos) << c.bytes.substr(0, 60) << "\n" << r.body;
    EXPECT_NO_THROW((void)json::parse(r.body)) << r.body;
    EXPECT_EQ(r.body.find("no route POST"), std::string::npos) << r.body;
  }
  RawReply wrong = raw_request(s.port, "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(wrong.head.find("Allow: POST"), std::string::npos) << wrong.head;
  // A JSON body larger than httplib's 8 KB form limit, sent as the guide shows, works.
  const std::string big = json{{"prompt", "x"}, {"user", std::string(20000, 'u')}, {"max_tokens", 1}}.dump();
  RawReply ok = raw_request(s.port, post_head("/v1/completions", big.size()) + big);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(s.health(), 200);
}

// Defect 10: what OpenAI clients expect.
TEST(HostileClients, OpenAiCompatibility) {
  ServerOptions so;
  so.api_key = "sesame";
  TestServer s(so);
  auto c = s.client();
  const httplib::Headers key = {{"Authorization", "bEaReR sesame"}};  // the scheme is case-insensitive
  auto model = c.Get("/v1/models/demo", key);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->status, 200) << model->body;
  EXPECT_EQ(json::parse(model->body)["id"], "demo");
  EXPECT_GT(json::parse(model->body)["created"].get<int64_t>(), 1700000000);
  EXPECT_EQ(c.Get("/v1/models/other", key)->status, 404);
  EXPECT_GT(json::parse(c.Get("/v1/models", key)->body)["data"][0]["created"].get<int64_t>(), 1700000000);
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer SESAME"}})->status, 401);  // the key is not
  struct Case {
    json body;
    std::string param;
  };
  const std::vector<Case> refused = {
      {{{"prompt", "x"}, {"response_format", {{"type", "json_object"}}}}, "response_format"},
      {{{"prompt", "x"}, {"user", 123}}, "user"},
      {{{"prompt", "x"}, {"stream", true}, {"stream_options", "x"}}, "stream_options"},
      {{{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"prompt", "x"}, {"functions", json::array()}}, "functions"},
      {{{"prompt", "x"}, {"tool_choice", "required"}}, "tool_choice"},
  };
  for (const Case& k : refused) {
    auto r = c.Post("/v1/completions", key, k.body.dump(), "application/json");
    EXPECT_EQ(r->status, 400) << k.body.dump() << " -> " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], k.param) << r->body;
  }
  auto ok = c.Post("/v1/completions", key, json{{"prompt", "x"}, {"max_tokens", 1}, {"user", "u1"}, {"response_format", {{"type", "text"}}}}.dump(),
                   "application/json");
  EXPECT_EQ(ok->status, 200) << ok->body;
  // Ids are unique, across restarts too (random, not a counter from 1).
  const std::string id1 = json::parse(ok->body)["id"];
  const std::string id2 = json::parse(c.Post("/v1/completions", key, json{{"prompt", "x"}, {"max_tokens", 1}}.dump(), "application/json")->body)["id"];
  EXPECT_NE(id1, id2);
  EXPECT_NE(id1, "cmpl-1");
  EXPECT_GE(id1.size(), 20u);
}

// Also expected of a server: llama.cpp's /tokenize and /detokenize.
TEST(HostileClients, TokenizeAndDetokenize) {
  TestServer s;
  auto c = s.client();
  auto t = c.Post("/tokenize", json{{"content", "def add(a, b):"}, {"with_pieces", true}}.dump(), "application/json");
  ASSERT_EQ(t->status, 200) << t->body;
  const json tokens = json::parse(t->body)["tokens"];
  ASSERT_GT(tokens.size(), 2u);
  std::string pieces;
  json ids = json::array();
  for (const json& x : tokens) {
    pieces += x["piece"].get<std::string>();
    ids.push_back(x["id"]);
  }
  EXPECT_EQ(pieces, "def add(a, b):");
  auto d = c.Post("/detokenize", json{{"tokens", ids}}.dump(), "application/json");
  ASSERT_EQ(d->status, 200) << d->body;
  EXPECT_EQ(json::parse(d->body)["content"], "def add(a, b):");
  EXPECT_EQ(c.Post("/detokenize", json{{"tokens", {uint64_t(1) << 33}}}.dump(), "application/json")->status, 400);
  EXPECT_EQ(c.Post("/tokenize", json{{"text", "x"}}.dump(), "application/json")->status, 400);
}

}  // namespace
}  // namespace skim::server
