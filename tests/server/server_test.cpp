// skim serve's HTTP layer as a client meets it, on the demo model: completions equal
// Engine::generate, streams carry the same text, requests beyond --parallel queue and still
// match, per-request policies switch the engine, bad requests get JSON errors that name the
// field while the server goes on, and a client that goes away frees its sequence.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <thread>

#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "model/config.h"
#include "server/openai_api.h"
#include "server/server.h"
#include "skim/engine.h"
#include "tokenizer/tokenizer.h"

namespace skim::server {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kDemo = fs::path(SKIM_SOURCE_DIR) / "models/demo-code-28m";
constexpr int kCtx = 512;

EngineOptions demo_options() {
  EngineOptions o;
  o.model_dir = kDemo;
  o.max_context = kCtx;
  o.max_sequences = 2;
  o.prefill_chunk = 64;  // prompts over 64 tokens prefill in several scheduler steps
  return o;
}

// A ChatML template that refuses roles it does not know, as a real one would.
const char* kChatML =
    "{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown role ' ~ m.role) }}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// One server for the whole binary; its chat template comes from a temporary directory holding a
// ChatML tokenizer_config.json (the demo model has no chat template).
struct Served {
  Engine engine{demo_options()};
  Engine reference{demo_options()};  // generates alone, for comparison
  fs::path chat_dir = fs::temp_directory_path() / "skim_server_test_chat";
  std::unique_ptr<Server> server;
  std::thread thread;
  int port = 0;

  Served() {
    fs::create_directories(chat_dir);
    std::ofstream(chat_dir / "tokenizer_config.json") << json{{"chat_template", kChatML}}.dump();
    ServerOptions so;
    so.port = 0;
    so.model_name = "demo";
    so.model_dir = chat_dir;
    server = std::make_unique<Server>(engine, so);
    server->bind();
    port = server->bound_port();
    thread = std::thread([this] { server->listen(); });
  }
  ~Served() {
    server->stop();
    thread.join();
    server.reset();
    fs::remove_all(chat_dir);
  }
};

Served& served() {
  static Served* s = new Served();  // lives until exit (the listen thread with it)
  return *s;
}

httplib::Client client() {
  httplib::Client c("127.0.0.1", served().port);
  c.set_read_timeout(120, 0);
  return c;
}

struct Reply {
  int status = 0;
  json body;
  std::string raw;
};

Reply post(const std::string& path, const json& body) {
  auto c = client();
  auto r = c.Post(path, body.dump(), "application/json");
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.body = json::parse(r->body, nullptr, false);
  return out;
}

GenerationResult alone(const std::string& prompt, int n) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.ignore_eos = true;
  return served().reference.generate({r})[0];
}

json greedy(const std::string& prompt, int n) {
  return {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}};
}

// The text pieces and the last chunk of a server-sent-event body.
struct Stream {
  std::string text;
  json last;   // the last chunk with a choice
  json usage;  // the usage chunk (stream_options.include_usage), if any
  bool done = false;
  int chunks = 0;
};
Stream parse_stream(const std::string& raw, const char* field = "text") {
  Stream s;
  size_t at = 0;
  while ((at = raw.find("data: ", at)) != std::string::npos) {
    const size_t end = raw.find("\n\n", at);
    const std::string data = raw.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    json j = json::parse(data);
    ++s.chunks;
    if (j["choices"].empty()) {  // the usage chunk
      s.usage = j["usage"];
      continue;
    }
    s.last = j;
    const json& ch = j["choices"][0];
    if (std::string(field) == "text")
      s.text += ch["text"].get<std::string>();
    else if (ch["delta"].contains("content"))
      s.text += ch["delta"]["content"].get<std::string>();
  }
  return s;
}

double metric(const std::string& name) {
  auto c = client();
  auto r = c.Get("/metrics");
  const std::string key = "skim_" + name + " ";
  const size_t at = r->body.find("\n" + key);
  return at == std::string::npos ? -1 : std::stod(r->body.substr(at + 1 + key.size()));
}

// A streamed POST /v1/completions on a raw socket (so the test can hang up mid-stream): returns
// the socket once the first token's chunk has arrived, or -1.
int open_stream(int port, const json& body, const std::string& extra_headers = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return close(fd), -1;
  const std::string b = body.dump();
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + extra_headers +
                          "Content-Type: application/json\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
  if (write(fd, req.data(), req.size()) != ssize_t(req.size())) return close(fd), -1;
  std::string got;
  char buf[512];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return close(fd), -1;
    got.append(buf, size_t(n));
  }
  return fd;
}

TEST(Server, CompletionEqualsEngineGenerate) {
  Reply r = post("/v1/completions", greedy("def fibonacci(n):", 24));
  ASSERT_EQ(r.status, 200) << r.raw;
  const GenerationResult ref = alone("def fibonacci(n):", 24);
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["model"], "demo");
  EXPECT_EQ(r.body["choices"][0]["text"], ref.text);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 24);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], ref.stats.prompt_tokens);
  EXPECT_EQ(r.body["skim"]["policy"], "dense");
}

TEST(Server, StreamCarriesTheSameText) {
  json body = greedy("class Stack:\n", 20);
  body["stream"] = true;
  Reply r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200);
  Stream s = parse_stream(r.raw);
  EXPECT_TRUE(s.done);
  EXPECT_GT(s.chunks, 2);
  EXPECT_EQ(s.text, alone("class Stack:\n", 20).text);
  EXPECT_EQ(s.last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(s.usage.is_null());  // only when asked for
  // stream_options.include_usage: a last chunk with no choices and the usage (OpenAI's shape).
  body["stream_options"] = {{"include_usage", true}};
  s = parse_stream(post("/v1/completions", body).raw);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.usage["completion_tokens"], 20);
  EXPECT_EQ(s.usage["total_tokens"], s.usage["prompt_tokens"].get<int>() + 20);
}

TEST(Server, RequestsBeyondParallelQueueAndMatchAlone) {
  const std::vector<std::string> prompts = {"import os\n", "def main():\n", "for i in range(", "x = [",
                                            "class A:\n    def"};
  std::vector<std::future<Reply>> replies;
  for (const auto& p : prompts)
    replies.push_back(std::async(std::launch::async, [p] { return post("/v1/completions", greedy(p, 16)); }));
  for (size_t i = 0; i < prompts.size(); ++i) {
    Reply r = replies[i].get();
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["text"], alone(prompts[i], 16).text) << prompts[i];
  }
}

TEST(Server, LongPromptsPrefillInChunksBetweenDecodeSteps) {
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "x" + std::to_string(i) + " = compute(" + std::to_string(i) + ")\n";
  const GenerationResult ref_long = alone(long_prompt, 8);
  ASSERT_GE(ref_long.stats.prompt_tokens, 5 * 64);  // five chunks or more
  const double steps0 = metric("decode_steps_total");
  auto running = std::async(std::launch::async, [] { return post("/v1/completions", greedy("def slow():\n", 48)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Reply l = post("/v1/completions", greedy(long_prompt, 8));
  Reply r = running.get();
  ASSERT_EQ(l.status, 200) << l.raw;
  EXPECT_EQ(l.body["choices"][0]["text"], ref_long.text);
  EXPECT_EQ(l.body["usage"]["prompt_tokens"], ref_long.stats.prompt_tokens);
  EXPECT_EQ(r.body["choices"][0]["text"], alone("def slow():\n", 48).text);
  EXPECT_GE(metric("decode_steps_total"), steps0 + 47);
}

// n choices: seeds seed, seed + 1, ... (each equals a request with that seed), streamed
// with their index.
TEST(Server, ChoicesAreRequestsWithConsecutiveSeeds) {
  json body = {{"prompt", "def run():"}, {"max_tokens", 10}, {"temperature", 0.9}, {"seed", 5}, {"n", 3}};
  Reply r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["choices"].size(), 3u);
  int total = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.body["choices"][i]["index"], i);
    json one = body;
    one["n"] = 1;
    one["seed"] = 5 + i;
    EXPECT_EQ(post("/v1/completions", one).body["choices"][0]["text"], r.body["choices"][i]["text"]) << i;
    total += 10;
  }
  EXPECT_EQ(r.body["usage"]["completion_tokens"], total);
  body["stream"] = true;
  Reply st = post("/v1/completions", body);
  std::vector<std::string> texts(3);
  size_t at = 0;
  while ((at = st.raw.find("data: {", at)) != std::string::npos) {
    const size_t end = st.raw.find("\n\n", at);
    json j = json::parse(st.raw.substr(at + 6, end - at - 6));
    at = end;
    texts[j["choices"][0]["index"].get<size_t>()] += j["choices"][0]["text"].get<std::string>();
  }
  EXPECT_NE(st.raw.find("data: [DONE]"), std::string::npos);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(texts[size_t(i)], r.body["choices"][i]["text"]) << i;
}

TEST(Server, SeededSamplingRepeats) {
  json body = {{"prompt", "def parse(s):"}, {"max_tokens", 12}, {"temperature", 0.9}, {"seed", 7}};
  Reply a = post("/v1/completions", body), b = post("/v1/completions", body);
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.body["choices"][0]["text"], b.body["choices"][0]["text"]);
}

// A resa request's rectifications show in /metrics: f = 4 over 12 generated tokens (the first
// from the prefill) is two rectifications of 4 tokens, each its own pass.
TEST(Server, RectificationsShowInTheMetrics) {
  const double tokens0 = metric("rectified_tokens_total"), passes0 = metric("rectification_passes_total");
  json body = greedy("def merge(a, b):", 12);
  body["policy"] = "resa:keep=0.5,n_min=1,f=4";
  Reply r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(metric("rectified_tokens_total"), tokens0 + 8);
  EXPECT_EQ(metric("rectification_passes_total"), passes0 + 2);
}

TEST(Server, PerRequestPolicySwitchesTheEngineAndBack) {
  const double switches = metric("policy_switches_total");
  json body = greedy("def merge(a, b):", 12);
  body["policy"] = "streaming";
  Reply r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["skim"]["policy"], "streaming");
  Reply d = post("/v1/completions", greedy("def merge(a, b):", 12));
  EXPECT_EQ(d.body["skim"]["policy"], "dense");
  EXPECT_EQ(d.body["choices"][0]["text"], alone("def merge(a, b):", 12).text);
  EXPECT_GE(metric("policy_switches_total"), switches + 2);
}

TEST(Server, BadRequestsGetJsonErrorsNamingTheField) {
  struct Case {
    json body;
    int status;
    std::string param;
  };
  std::vector<int> long_prompt(kCtx + 10, 42);
  const std::vector<Case> cases = {
      {{{"prompt", 5}}, 400, "prompt"},
      {{{"prompt", "x"}, {"n", 0}}, 400, "n"},
      {{{"prompt", "x"}, {"best_of", 2}}, 400, "best_of"},
      {{{"prompt", "x"}, {"temperature", 3}}, 400, "temperature"},
      {{{"prompt", "x"}, {"max_tokens", -1}}, 400, "max_tokens"},
      {{{"prompt", "x"}, {"stop", {"a", "b", "c", "d", "e"}}}, 400, "stop"},
      {{{"prompt", "x"}, {"model", "gpt-4"}}, 404, "model"},
      {{{"prompt", "x"}, {"policy", "bogus"}}, 400, "policy"},
      {{{"prompt", "x"}, {"policy", "quest:nokey=1"}}, 400, "policy"},
      {{{"prompt", long_prompt}}, 400, "prompt"},
      {{{"prompt", {1, 2, 999999}}}, 400, "prompt"},
  };
  for (const Case& c : cases) {
    Reply r = post("/v1/completions", c.body);
    EXPECT_EQ(r.status, c.status) << c.body.dump() << " -> " << r.raw;
    ASSERT_TRUE(r.body.contains("error")) << r.raw;
    EXPECT_EQ(r.body["error"]["param"], c.param) << c.body.dump();
    EXPECT_FALSE(r.body["error"]["message"].get<std::string>().empty());
  }
  auto c = client();
  auto bad_json = c.Post("/v1/completions", "{nope", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  Reply over = post("/v1/completions", {{"prompt", long_prompt}});
  EXPECT_NE(over.body["error"]["message"].get<std::string>().find("context is 512 tokens"), std::string::npos);
  EXPECT_EQ(over.body["error"]["message"].get<std::string>().find("--"), std::string::npos);  // no CLI flags
  EXPECT_EQ(client().Get("/health")->status, 200);  // the server goes on
  EXPECT_EQ(post("/v1/completions", greedy("import re\n", 4)).status, 200);
}

TEST(Server, ContextLimitEndsWithLength) {
  const int prompt = kCtx - 8;
  std::vector<int> ids(size_t(prompt), 0);
  for (int i = 0; i < prompt; ++i) ids[size_t(i)] = 100 + i % 50;
  // More than the context leaves: refused up front, naming what is left.
  Reply r = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 100}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["param"], "max_tokens");
  // Exactly what is left: prompt + generated fill the context, never one more.
  r = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], kCtx - prompt);
  // Chat's default max_tokens is the rest of the context, and the total stays within it.
  r = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", std::string(900, 'a')}}}},
                                    {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["usage"]["total_tokens"], kCtx);
}

TEST(Server, ChatCompletionsUseTheChatFormat) {
  json body = {{"messages", {{{"role", "user"}, {"content", "def add(a, b):"}}}},
               {"max_tokens", 8},
               {"temperature", 0},
               {"ignore_eos", true}};
  Reply r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(r.body["choices"][0]["message"]["role"], "assistant");
  const std::string text = r.body["choices"][0]["message"]["content"];
  body["stream"] = true;
  Reply s = post("/v1/chat/completions", body);
  Stream st = parse_stream(s.raw, "delta");
  EXPECT_EQ(st.text, text);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.last["object"], "chat.completion.chunk");
  Reply bad = post("/v1/chat/completions", {{"messages", {{{"role", "robot"}, {"content", "x"}}}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["error"]["param"], "messages");
}

TEST(Server, ClientGoingAwayFreesItsSequence) {
  const double before = metric("requests_cancelled_total");
  {  // a long streamed request: read its first token, hang up
    json body = greedy("def loop():\n", 400);
    body["stream"] = true;
    const int fd = open_stream(served().port, body);
    ASSERT_GE(fd, 0);
    close(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (metric("requests_cancelled_total") <= before &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GT(metric("requests_cancelled_total"), before);
  EXPECT_EQ(post("/v1/completions", greedy("import io\n", 4)).status, 200);
}

TEST(Server, ModelsHealthAndMetrics) {
  auto c = client();
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  json j = json::parse(m->body);
  EXPECT_EQ(j["data"][0]["id"], "demo");
  EXPECT_EQ(j["data"][0]["max_context"], kCtx);
  EXPECT_EQ(j["data"][0]["chat_template"], (served().chat_dir / "tokenizer_config.json").string());
  EXPECT_EQ(json::parse(c.Get("/health")->body)["status"], "ok");
  auto none = c.Get("/v1/nothing");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  EXPECT_NE(json::parse(none->body)["error"]["message"].get<std::string>().find("/v1/nothing"), std::string::npos);
  EXPECT_GE(metric("generated_tokens_total"), 0);
  EXPECT_GE(metric("requests_running"), 0);
}

// Log-probabilities against the engine's own logits: the generated tokens' (greedy: the top
// alternative), and with echo the prompt's, the first prompt token having none.
TEST(Server, LogprobsFollowTheEngineLogits) {
  const std::string prompt = "def area(r):";
  json body = greedy(prompt, 4);
  body["logprobs"] = 2;
  body["echo"] = true;
  Reply r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& lp = r.body["choices"][0]["logprobs"];
  const int n_prompt = r.body["usage"]["prompt_tokens"], n_gen = r.body["usage"]["completion_tokens"];
  ASSERT_EQ(int(lp["tokens"].size()), n_prompt + n_gen);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(r.body["choices"][0]["text"].get<std::string>().rfind(prompt, 0), 0u);  // echoed

  // The reference: the same prompt on the reference engine, all rows' logits.
  Engine& e = served().reference;
  const std::vector<int> ids = e.tokenizer().encode_prompt(prompt);
  ASSERT_EQ(int(ids.size()), n_prompt);
  std::vector<int> rows(ids.size());
  std::iota(rows.begin(), rows.end(), 0);
  const int seq = e.open_sequence();
  const std::vector<float> logits = e.append(seq, ids, rows);
  e.close_sequence(seq);
  const size_t vocab = size_t(e.config().vocab_size);
  for (int i = 1; i < n_prompt; ++i) {
    const TokenLogprob want = token_logprob(std::span<const float>(logits.data() + size_t(i - 1) * vocab, vocab), ids[size_t(i)], 0);
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), want.logprob, 1e-4) << "prompt token " << i;
  }
  const TokenLogprob first = token_logprob(std::span<const float>(logits.data() + size_t(n_prompt - 1) * vocab, vocab),
                                           argmax(std::span<const float>(logits.data() + size_t(n_prompt - 1) * vocab, vocab)), 2);
  EXPECT_NEAR(lp["token_logprobs"][n_prompt].get<double>(), first.logprob, 1e-4);
  for (int i = n_prompt; i < n_prompt + n_gen; ++i) {
    const double got = lp["token_logprobs"][i];
    EXPECT_LE(got, 0.0);
    double best = -1e30;
    for (auto& [tok, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
    EXPECT_NEAR(best, got, 1e-6) << "greedy picks the most likely token";
  }
  // Streamed, the chunks carry the same log-probabilities, token by token.
  json streamed = greedy(prompt, 4);
  streamed["logprobs"] = 2;
  streamed["stream"] = true;
  Reply st = post("/v1/completions", streamed);
  ASSERT_EQ(st.status, 200);
  std::vector<double> chunk_lps;
  size_t at = 0;
  while ((at = st.raw.find("data: {", at)) != std::string::npos) {
    const size_t end = st.raw.find("\n\n", at);
    json j = json::parse(st.raw.substr(at + 6, end - at - 6));
    at = end;
    const json& l = j["choices"][0]["logprobs"];
    if (!l.is_null())
      for (const json& v : l["token_logprobs"]) chunk_lps.push_back(v.get<double>());
  }
  ASSERT_EQ(int(chunk_lps.size()), n_gen);
  for (int i = 0; i < n_gen; ++i) EXPECT_NEAR(chunk_lps[size_t(i)], lp["token_logprobs"][n_prompt + i].get<double>(), 1e-6);

  json chat = {{"messages", {{{"role", "user"}, {"content", "x = 1"}}}}, {"max_tokens", 3}, {"temperature", 0},
               {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 1}};
  Reply c = post("/v1/chat/completions", chat);
  ASSERT_EQ(c.status, 200) << c.raw;
  EXPECT_EQ(c.body["choices"][0]["logprobs"]["content"].size(), 3u);
  EXPECT_EQ(c.body["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 1u);
}

// A second server with an API key and no queue (--parallel 1, --max-waiting 0).
TEST(Server, ApiKeyAndBusyRefusals) {
  EngineOptions o = demo_options();
  o.max_sequences = 1;
  Engine engine(o);
  ServerOptions so;
  so.port = 0;
  so.model_name = "demo";
  so.api_key = "sesame";
  so.max_waiting = 0;
  Server server(engine, so);
  server.bind();
  std::thread t([&] { server.listen(); });
  struct StopAtExit {  // also when an ASSERT returns early
    Server& s;
    std::thread& t;
    ~StopAtExit() {
      s.stop();
      t.join();
    }
  } stop_at_exit{server, t};
  httplib::Client c("127.0.0.1", server.bound_port());
  c.set_read_timeout(120, 0);
  const std::string body = greedy("def f(x):", 4).dump();
  EXPECT_EQ(c.Get("/health")->status, 200);  // probes need no key
  EXPECT_EQ(c.Post("/v1/completions", body, "application/json")->status, 401);
  EXPECT_EQ(c.Post("/v1/completions", {{"Authorization", "Bearer nope"}}, body, "application/json")->status, 401);
  const httplib::Headers key = {{"Authorization", "Bearer sesame"}};
  EXPECT_EQ(c.Post("/v1/completions", key, body, "application/json")->status, 200);

  // One long streamed request holds the only sequence (its first bytes prove it runs);
  // another then finds no room and no queue.
  json long_body = greedy("def g(y):", 400);
  long_body["stream"] = true;
  const int fd = open_stream(server.bound_port(), long_body, "Authorization: Bearer sesame\r\n");
  ASSERT_GE(fd, 0);
  auto busy = c.Post("/v1/completions", key, body, "application/json");
  EXPECT_EQ(busy->status, 503) << busy->body;
  EXPECT_EQ(json::parse(busy->body)["error"]["type"], "server_busy");
  close(fd);  // the long one is cancelled; the sequence comes back
  bool served_again = false;
  for (int i = 0; i < 200 && !served_again; ++i) {
    served_again = c.Post("/v1/completions", key, body, "application/json")->status == 200;
    if (!served_again) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(served_again);
}

// Prefix cache: a prompt that starts with a finished request's prompt resumes from a copy of
// its cache (whole chunks only) and gives exactly what a fresh prefill gives.
TEST(Server, PrefixCacheResumesAndEqualsAFreshPrefill) {
  EngineOptions o = demo_options();
  o.max_sequences = 3;  // 1 running + 2 cached
  Engine engine(o);
  ServerOptions so;
  so.port = 0;
  so.model_name = "demo";
  so.max_running = 1;
  so.prefix_cache = 2;
  Server server(engine, so);
  server.bind();
  std::thread t([&] { server.listen(); });
  httplib::Client c("127.0.0.1", server.bound_port());
  c.set_read_timeout(120, 0);
  auto ask = [&](const std::string& prompt) {
    auto r = c.Post("/v1/completions", greedy(prompt, 8).dump(), "application/json");
    return r && r->status == 200 ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : std::string("ERROR");
  };
  auto metric_of = [&](const std::string& name) {
    const std::string body = c.Get("/metrics")->body, key = "\nskim_" + name + " ";
    const size_t at = body.find(key);
    return at == std::string::npos ? -1.0 : std::stod(body.substr(at + key.size()));
  };
  std::string doc;
  for (int i = 0; i < 30; ++i) doc += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + "\n";
  const std::string longer = doc + "def main():\n    print(f3(2))\n";
  EXPECT_EQ(ask(doc), alone(doc, 8).text);
  EXPECT_EQ(metric_of("prefix_cache_hits_total"), 0);
  EXPECT_EQ(ask(longer), alone(longer, 8).text);  // resumes from doc's cached chunks
  EXPECT_EQ(metric_of("prefix_cache_hits_total"), 1);
  EXPECT_GE(metric_of("prefix_cache_tokens_total"), 128);
  EXPECT_EQ(ask(doc), alone(doc, 8).text);  // the same prompt again: all but its last chunk
  EXPECT_EQ(metric_of("prefix_cache_hits_total"), 2);
  EXPECT_EQ(ask("import sys\n"), alone("import sys\n", 8).text);  // nothing in common
  EXPECT_EQ(metric_of("prefix_cache_hits_total"), 2);
  server.stop();
  t.join();
}

// parse_request alone: defaults and checks without a server.
TEST(OpenAiApi, DefaultsFollowOpenAiAndChecksNameTheField) {
  Served& s = served();
  ServedModel m{"demo", &s.reference.tokenizer(), nullptr, kCtx};
  ParsedRequest p = parse_request({{"prompt", "x"}}, Endpoint::kCompletions, m);
  EXPECT_EQ(p.request.max_tokens, 16);
  EXPECT_FLOAT_EQ(p.request.sampling.temperature, 1.0f);
  EXPECT_FALSE(p.stream);
  p = parse_request({{"prompt", {"x"}}, {"seed", 11}, {"stop", "\n"}, {"top_k", 5}}, Endpoint::kCompletions, m);
  EXPECT_EQ(p.request.sampling.seed, 11u);
  EXPECT_EQ(p.request.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(p.request.sampling.top_k, 5);
  try {
    parse_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}}, Endpoint::kChat, m);
    FAIL() << "expected an error";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param, "messages");
    EXPECT_NE(std::string(e.what()).find("/v1/completions"), std::string::npos);
  }
  ServedModel chat = m;
  chat.chat = std::make_shared<const ChatTemplate>(kChatML, "chatml");
  p = parse_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}}, Endpoint::kChat, chat);
  EXPECT_EQ(p.request.max_tokens, kCtx - int(p.request.prompt_ids.size()));  // chat: up to the context
  EXPECT_THROW(parse_request(json::array(), Endpoint::kCompletions, m), RequestError);
  EXPECT_EQ(parse_request({{"prompt", "x"}, {"logprobs", 3}}, Endpoint::kCompletions, m).request.logprobs, 3);
  EXPECT_THROW(parse_request({{"prompt", "x"}, {"logprobs", 30}}, Endpoint::kCompletions, m), RequestError);
  EXPECT_EQ(parse_request({{"prompt", "x"}, {"logprobs", 1}, {"stream", true}}, Endpoint::kCompletions, m).request.logprobs, 1);
  EXPECT_THROW(parse_request({{"prompt", "x"}, {"logprobs", 1}, {"echo", true}, {"stream", true}}, Endpoint::kCompletions, m),
               RequestError);
  EXPECT_THROW(parse_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}}, Endpoint::kChat, chat),
               RequestError);  // top_logprobs without logprobs: true
  // The chat template sees messages as sent (developer read as system), tools and
  // chat_template_kwargs; its errors name messages.
  ServedModel echo = m;
  echo.chat = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}{{ m.role }}:{{ m.content if m.content is string else m.content | map(attribute='text') | join }};"
      "{% endfor %}{{ tools | map(attribute='function.name') | join(',') if tools }}|{{ flag }}", "echo");
  p = parse_request({{"messages", {{{"role", "developer"}, {"content", "be brief"}},
                                   {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
                                   {{"role", "tool"}, {"content", "42"}}}},
                     {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
                     {"chat_template_kwargs", {{"flag", true}}}},
                    Endpoint::kChat, echo);
  EXPECT_EQ(s.reference.tokenizer().decode(p.request.prompt_ids), "system:be brief;user:ab;tool:42;f|True");
  EXPECT_THROW(parse_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"chat_template_kwargs", 1}}, Endpoint::kChat, echo),
               RequestError);
  // A tool call's arguments arrive as a JSON string; the template gets the object.
  ServedModel calls = m;
  calls.chat = std::make_shared<const ChatTemplate>("{{ messages[0].tool_calls[0].function.arguments | tojson }}", "calls");
  p = parse_request({{"messages", {{{"role", "assistant"}, {"content", nullptr},
                                    {"tool_calls", {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", R"({"b": 1, "a": [2]})"}}}}}}}}}},
                    Endpoint::kChat, calls);
  EXPECT_EQ(s.reference.tokenizer().decode(p.request.prompt_ids), R"({"b": 1, "a": [2]})");
  // With the body's text, the template sees keys in the request's order (else sorted).
  ServedModel dump = m;
  dump.chat = std::make_shared<const ChatTemplate>("{{ tools | tojson }}", "dump");
  const std::string raw = R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]})";
  p = parse_request(json::parse(raw), Endpoint::kChat, dump, raw);
  EXPECT_EQ(s.reference.tokenizer().decode(p.request.prompt_ids), R"([{"type": "function", "function": {"name": "f"}}])");
  p = parse_request(json::parse(raw), Endpoint::kChat, dump);
  EXPECT_EQ(s.reference.tokenizer().decode(p.request.prompt_ids), R"([{"function": {"name": "f"}, "type": "function"}])");
  try {
    parse_request({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}, Endpoint::kChat, chat);
    FAIL() << "expected an error";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param, "messages");
    EXPECT_NE(std::string(e.what()).find("unknown role robot"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_request({{"prompt", "x"}, {"logprobs", 21}}, Endpoint::kCompletions, m), RequestError);
}

}  // namespace
}  // namespace skim::server
