// Engine::generate on the demo model: batched decoding equals one sequence at a time, stop
// strings cut the text, EOS and max_tokens end sequences, sampling repeats with its seed.
#include <gtest/gtest.h>

#include "attention/policy.h"
#include "engine/logprobs.h"
#include "model/config.h"
#include "skim/engine.h"
#include "tokenizer/tokenizer.h"

namespace skim {
namespace {

Engine& demo() {
  static Engine* e = [] {
    EngineOptions o;
    o.model_dir = std::filesystem::path(SKIM_SOURCE_DIR) / "models/demo-code-28m";
    o.max_context = 512;
    o.max_sequences = 4;
    return new Engine(o);
  }();
  return *e;
}

GenerationRequest request(const std::string& prompt, int n) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.ignore_eos = true;
  return r;
}

// More requests than the engine has sequences: the scheduler's steps run them in turn.
TEST(Generate, MoreRequestsThanSequencesWaitTheirTurn) {
  std::vector<GenerationRequest> rs;
  for (int i = 0; i < 6; ++i) rs.push_back(request(i % 2 ? "import os\n" : "def f(x):\n", 8 + i));
  auto results = demo().generate(rs);
  ASSERT_EQ(results.size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(int(results[i].tokens.size()), rs[i].max_tokens) << i;
    EXPECT_EQ(results[i].tokens, demo().generate({rs[i]})[0].tokens) << i;
  }
}

// The prefill chunk left at 0 is the device's default (the CPU's 512); a negative one is refused
// naming the field.
TEST(Generate, PrefillChunkZeroIsTheDeviceDefault) {
  EXPECT_EQ(demo().prefill_chunk(), kCpuPrefillChunk);
  EngineOptions o;
  o.model_dir = std::filesystem::path(SKIM_SOURCE_DIR) / "models/demo-code-28m";
  o.prefill_chunk = -1;
  try {
    Engine e(o);
    ADD_FAILURE() << "a negative chunk was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("prefill_chunk"), std::string::npos) << e.what();
  }
}

// The public statistics: bytes read as decode_kv_bytes_read reports them, and the policy's counters.
TEST(Generate, PolicyStatsReportBytesAndCounters) {
  const double before = demo().policy_stats().decode_kv_bytes_read;
  demo().generate({request("import os\n", 8)});
  const PolicyStats s = demo().policy_stats();
  EXPECT_GT(s.decode_kv_bytes_read, before);
  EXPECT_EQ(s.decode_kv_bytes_read, demo().decode_kv_bytes_read());
  EXPECT_EQ(s.counters, demo().policy().counters());
}

TEST(Generate, BatchedDecodingEqualsOneAtATime) {
  std::vector<GenerationRequest> rs = {request("import os\n", 24), request("class Foo:\n    def", 16),
                                       request("def main():\n    x = [", 20)};
  rs[1].sampling.temperature = 0.8f;
  rs[1].sampling.seed = 3;
  auto together = demo().generate(rs);
  for (size_t i = 0; i < rs.size(); ++i) {
    auto alone = demo().generate({rs[i]});
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << i;
    EXPECT_EQ(together[i].text, alone[0].text) << i;
    EXPECT_EQ(int(together[i].tokens.size()), rs[i].max_tokens);
  }
}

TEST(Generate, TextIsTheDecodedTokensAndStreamsInOrder) {
  std::string streamed;
  auto r = demo().generate({request("def add(a, b):", 32)},
                           [&](size_t, std::string_view t) { streamed += t; });
  EXPECT_EQ(r[0].text, demo().tokenizer().decode(r[0].tokens));
  EXPECT_EQ(streamed, r[0].text);
}

TEST(Generate, StopStringCutsTheText) {
  auto full = demo().generate({request("def add(a, b):", 48)});
  ASSERT_GT(full[0].text.size(), 12u);
  std::string stop = full[0].text.substr(6, 4);  // some text the model does produce
  GenerationRequest r = request("def add(a, b):", 48);
  r.stop = {stop};
  std::string streamed;
  auto cut = demo().generate({r}, [&](size_t, std::string_view t) { streamed += t; });
  EXPECT_EQ(cut[0].stats.finish_reason, "stop");
  EXPECT_EQ(cut[0].text, full[0].text.substr(0, full[0].text.find(stop)));
  EXPECT_EQ(streamed, cut[0].text);
}

TEST(Generate, EosEndsTheSequenceUnlessIgnored) {
  // Feed a prompt whose likely continuation quickly hits end-of-text by limiting nothing:
  // whatever the model does, a stop must be "stop" with no EOS token in the output.
  GenerationRequest r = request("x = 1\n", 200);
  r.ignore_eos = false;
  auto out = demo().generate({r});
  const auto& eos = demo().config().eos_token_ids;
  for (int t : out[0].tokens) EXPECT_EQ(std::count(eos.begin(), eos.end(), t), 0);
  if (int(out[0].tokens.size()) < 200) {
    EXPECT_EQ(out[0].stats.finish_reason, "stop");
  }
}

TEST(Generate, SeededSamplingRepeats) {
  GenerationRequest r = request("import", 24);
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 11;
  auto a = demo().generate({r});
  auto b = demo().generate({r});
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  r.sampling.seed = 12;
  auto c = demo().generate({r});
  EXPECT_NE(a[0].tokens, c[0].tokens);
}

TEST(Generate, LogprobsOfEveryTokenAndThePrompt) {
  GenerationRequest r = request("def add(a, b):", 6);
  r.logprobs = 3;
  r.echo_logprobs = true;
  auto out = demo().generate({r})[0];
  ASSERT_EQ(out.logprobs.size(), out.tokens.size());
  EXPECT_EQ(int(out.prompt_logprobs.size()), out.stats.prompt_tokens - 1);
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    const TokenLogprob& lp = out.logprobs[i];
    EXPECT_EQ(lp.token, out.tokens[i]);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].first, lp.token) << "greedy takes the most likely token";
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
    EXPECT_LE(lp.logprob, 0.0f);
  }
  GenerationRequest plain = request("def add(a, b):", 6);
  EXPECT_EQ(demo().generate({plain})[0].tokens, out.tokens);  // asking changes nothing else
  EXPECT_TRUE(demo().generate({plain})[0].logprobs.empty());
}

// Engine::decode_sample's log-probabilities (what the GPU computes on the device; here the
// host path) equal token_logprob of the same step's logits.
TEST(Generate, DecodeSampleReportsTheLogprobsOfItsTokens) {
  Engine& e = demo();
  const std::vector<int> prompt = e.tokenizer().encode("def add(a, b):");
  const int a = e.open_sequence(), b = e.open_sequence();
  e.append(a, prompt, {});
  e.append(b, prompt, {});
  Sampler greedy(SamplingParams{}), hot(SamplingParams{.temperature = 1.0f, .seed = 5});
  Sampler* samplers[] = {&greedy, &hot};
  const int seqs[] = {a, b}, tokens[] = {7, 7}, top[] = {3, -1};
  std::vector<TokenLogprob> lps;
  const std::vector<int> next = e.decode_sample(seqs, tokens, samplers, top, &lps);
  ASSERT_EQ(lps.size(), 2u);
  const int c = e.open_sequence();
  e.append(c, prompt, {});
  const std::vector<float> logits = e.decode(std::span<const int>(&c, 1), std::span<const int>(tokens, 1));
  const TokenLogprob want = token_logprob(logits, next[0], 3);
  EXPECT_EQ(lps[0].token, next[0]);
  EXPECT_FLOAT_EQ(lps[0].logprob, want.logprob);
  EXPECT_EQ(lps[0].top, want.top);
  EXPECT_TRUE(lps[1].top.empty());
  EXPECT_EQ(lps[1].token, -1) << "not asked";
  for (int s : {a, b, c}) e.close_sequence(s);
}

// One step decodes a sequence at most once (two rows would write its one next position).
TEST(Generate, DecodeRefusesASequenceTwiceInOneStep) {
  Engine& e = demo();
  const int a = e.open_sequence();
  e.append(a, e.tokenizer().encode("def add(a, b):"), {});
  const int seqs[] = {a, a}, tokens[] = {7, 7};
  try {
    e.decode(seqs, tokens);
    ADD_FAILURE() << "a sequence decoded twice in one step";
  } catch (const std::exception& err) {
    EXPECT_NE(std::string(err.what()).find("appears twice"), std::string::npos) << err.what();
  }
  e.close_sequence(a);
}

}  // namespace
}  // namespace skim
