// The metrics on a real engine (the tiny checkpoint, token ids): dense against dense gives
// zero output error, identical perplexity and full agreement; a sparse policy reads less and
// errs more than zero; the whole evaluation runs end to end on the demo model.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/policy.h"
#include "eval/agreement.h"
#include "eval/eval_runner.h"
#include "eval/output_error.h"
#include "eval/perplexity.h"
#include "eval/report.h"
#include "eval/selection_locality.h"
#include "model/config.h"
#include "skim/engine.h"

namespace skim::eval {
namespace {

const std::filesystem::path kRoot = SKIM_SOURCE_DIR;

std::unique_ptr<Engine> tiny_engine(int ctx) {
  EngineOptions o;
  o.model_dir = kRoot / "tests/fixtures/models/tiny-llama3";
  o.max_context = ctx;
  o.max_sequences = 2;
  o.prefill_chunk = 64;
  o.threads = 1;  // OpenMP threads contending for a busy machine's cores slow down many times
  return std::make_unique<Engine>(o);
}

std::vector<int> ids(int n, int vocab, int salt) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = (i * 131 + salt * 17 + i * i * 7) % vocab;
  return v;
}

struct PolicyRun {
  TeacherForcedRun forced;
  std::vector<LayerError> errors;
  double mean_error = 0;
};

// Teacher-forced decode of text[prefill..] on a fork of one dense prefill.
PolicyRun run(Engine& e, int base, const std::string& policy, const std::vector<int>& text, int prefill) {
  e.set_policy(policy);
  OutputErrorMeter meter(e.config().num_layers);
  meter.attach(e.policy());
  int fork = e.fork_sequence(base);
  std::span<const int> all(text);
  size_t m = text.size() - size_t(prefill) - 1;
  PolicyRun r;
  r.forced = teacher_forced_decode(e, fork, all.subspan(size_t(prefill), m), all.subspan(size_t(prefill) + 1, m));
  e.close_sequence(fork);
  r.errors = meter.per_layer();
  r.mean_error = meter.mean();
  return r;
}

TEST(EngineMetrics, DenseAgainstDenseIsExact) {
  auto e = tiny_engine(512);
  std::vector<int> text = ids(420, e->config().vocab_size, 1);
  const int prefill = 380;
  int base = e->open_sequence();
  e->append(base, std::span<const int>(text.data(), size_t(prefill)), {});
  PolicyRun a = run(*e, base, "dense", text, prefill);
  PolicyRun b = run(*e, base, "dense", text, prefill);
  ASSERT_EQ(a.forced.nll.size(), 39u);
  EXPECT_EQ(a.forced.nll, b.forced.nll);  // bit-identical: same cache, same kernels
  EXPECT_EQ(a.mean_error, 0.0);
  ASSERT_EQ(a.errors.size(), size_t(e->config().num_layers));
  for (const LayerError& l : a.errors) {
    EXPECT_EQ(l.mean, 0.0);
    EXPECT_EQ(l.p90, 0.0);
    EXPECT_EQ(l.samples, 39u * size_t(e->config().num_heads));
  }
  WorkSummary w = summarize(a.forced.work, e->config().head_dim);
  EXPECT_EQ(a.forced.work.steps, 39u);
  EXPECT_EQ(a.forced.work.first_steps, 1u);
  EXPECT_GT(w.tokens_per_second, 0.0);
  EXPECT_LE(a.forced.work.first_step_seconds, a.forced.work.seconds);
  EXPECT_DOUBLE_EQ(w.relative_to_dense, 1.0);

  e->set_policy("dense");
  int f1 = e->fork_sequence(base);
  GreedyRun g1 = greedy_decode(*e, f1, text[size_t(prefill)], 24);
  e->close_sequence(f1);
  int f2 = e->fork_sequence(base);
  GreedyRun g2 = greedy_decode(*e, f2, text[size_t(prefill)], 24);
  e->close_sequence(f2);
  EXPECT_EQ(g1.tokens, g2.tokens);
  EXPECT_EQ(edit_similarity(g1.tokens, g2.tokens), 1.0);
  EXPECT_EQ(first_divergence(g1.tokens, g2.tokens), 24u);
}

// Decode speed leaves out each run's first step (where cs builds its tables, mac its ring
// states) and reports it apart; a run of one step is all there is to time.
TEST(EngineMetrics, TokensPerSecondIsSteadyWithTheFirstStepApart) {
  DecodeWork a;
  a.steps = 11;
  a.seconds = 7.0;
  a.first_steps = 1;
  a.first_step_seconds = 5.0;
  DecodeWork b = a;
  b.first_step_seconds = 3.0;
  b.seconds = 5.0;
  a.add(b);  // two runs: 20 later steps in 4 s, first steps 5 s and 3 s
  WorkSummary s = summarize(a, 64);
  EXPECT_DOUBLE_EQ(s.tokens_per_second, 5.0);
  EXPECT_DOUBLE_EQ(s.first_step_seconds, 4.0);
  DecodeWork one;
  one.steps = 1;
  one.seconds = 0.5;
  one.first_steps = 1;
  one.first_step_seconds = 0.5;
  EXPECT_DOUBLE_EQ(summarize(one, 64).tokens_per_second, 2.0);
}

TEST(EngineMetrics, SparsePolicyReadsLessAndErrs) {
  auto e = tiny_engine(512);
  std::vector<int> text = ids(460, e->config().vocab_size, 2);
  const int prefill = 420;
  int base = e->open_sequence();
  e->append(base, std::span<const int>(text.data(), size_t(prefill)), {});
  PolicyRun dense = run(*e, base, "dense", text, prefill);
  PolicyRun sparse = run(*e, base, "gbsa:keep=0.05,n_min=2,n_local=1", text, prefill);
  PolicyRun rect = run(*e, base, "gbsa:keep=0.05,n_min=2,n_local=1+rectify:f=8", text, prefill);
  EXPECT_GT(sparse.mean_error, 1e-4);
  for (const LayerError& l : sparse.errors) EXPECT_GE(l.p90, 0.0);
  WorkSummary ws = summarize(sparse.forced.work, e->config().head_dim);
  EXPECT_LT(ws.relative_to_dense, 0.5);
  EXPECT_GT(ws.relative_to_dense, 0.0);
  EXPECT_NE(sparse.forced.nll, dense.forced.nll);
  // Rectification: 39 steps with f = 8 is 4 passes, each reading the cache once.
  EXPECT_EQ(rect.forced.work.rectified_tokens, 32u);
  EXPECT_GT(rect.forced.work.rectify_keys, 0u);
  WorkSummary wr = summarize(rect.forced.work, e->config().head_dim);
  EXPECT_GT(wr.relative_to_dense, ws.relative_to_dense);
  EXPECT_GT(wr.rectify_bytes_per_step, 0.0);
}

TEST(EngineMetrics, WholeEvaluationOnTheDemoModel) {
  EngineOptions eo;
  eo.model_dir = kRoot / "models/demo-code-28m";
  EvalOptions o;
  o.policies = {"dense", "quest:budget=0.25,min=32", "resa:keep=0.25,n_min=2,f=8"};
  o.ctx = 320;
  o.decode_tokens = 32;
  o.buckets = 2;
  o.agree_tokens = 8;
  o.lengths = {200};
  o.prompts = 2;
  o.depths = {0.5};
  o.keys = {1, 4};
  eo.max_context = o.ctx + o.answer_tokens + 8;
  eo.max_sequences = 2;
  eo.threads = 1;
  Engine engine(eo);
  Corpus corpus = load_corpus({kRoot / "data/heldout-python"});
  EvalResults r = run_eval(engine, corpus, o);
  ASSERT_EQ(r.policies.size(), 3u);
  const PolicyResult& dense = r.policies[0];
  EXPECT_EQ(dense.error->mean(), 0.0);
  EXPECT_DOUBLE_EQ(dense.agreement->mean_similarity(), 1.0);
  EXPECT_EQ(r.window_prefill, 320 - 32);
  for (const PolicyResult& p : r.policies) {
    EXPECT_EQ(p.nll->perplexity().size(), 2u);
    EXPECT_GT(p.nll->overall(), 1.0);
    EXPECT_EQ(p.retrieval.cells.at(1).at(200).total, 2);
    EXPECT_EQ(p.retrieval.cells.at(4).at(200).total, 2);
    EXPECT_EQ(p.window_work.steps, 32u + 8u);
  }
  EXPECT_GT(r.policies[2].window_work.rectified_tokens, 0u);
  nlohmann::json j = to_json(r);
  EXPECT_EQ(j["policies"].size(), 3u);
  EXPECT_EQ(j["policies"][0]["output_error"]["layers"].size(), size_t(engine.config().num_layers));
  EXPECT_TRUE(j["policies"][1]["passkey"]["4"]["200"].contains("accuracy"));
  std::string table = format_table(r);
  EXPECT_NE(table.find("resa:keep=0.25,n_min=2,f=8"), std::string::npos) << table;
}

// The locality meter's guessed queries on the CPU forward (AttentionPolicy::speculate): layer 1's
// choices over queries guessed from layer 0's input, then from it with layer 0's attention added,
// are reported before layer 1's own, once each per KV head and step (layer 0 has no layer
// before: no guess), and the guesses change no logit.
TEST(EngineMetrics, GuessedQueriesAreReportedAndChangeNothing) {
  const std::string policy = "quest:budget=0.25,min=0,dense_layers=0";
  const std::vector<int> text = ids(206, 256, 3);
  const int steps = 6;
  std::vector<std::vector<float>> logits[2];
  LocalityStats stats;
  for (int watched = 0; watched < 2; ++watched) {
    auto e = tiny_engine(256);
    e->set_policy(policy);
    SelectionLocalityMeter meter;
    if (watched) meter.attach(e->policy());
    const int seq = e->open_sequence();
    e->append(seq, std::span<const int>(text.data(), 200), {});
    for (int i = 0; i < steps; ++i) {
      const int t = text[size_t(200 + i)];
      logits[watched].push_back(e->decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1)));
    }
    SelectionLocalityMeter::detach(e->policy());
    if (watched) stats = meter.stats();
  }
  EXPECT_EQ(logits[1], logits[0]);
  const int kv_heads = 2;
  for (size_t g : {size_t(2), size_t(3)}) {  // at layer 0's attention, then at its MLP norm
    EXPECT_EQ(stats.ahead_lists[g], double((steps - 1) * kv_heads));  // the first step only fills the caches
    EXPECT_LE(stats.ahead_useful[g], stats.ahead_misses[g]);
    EXPECT_LE(stats.ahead_useful[g], stats.ahead_copied[g]);
  }
}

TEST(EngineMetrics, TheRetrievalQuestionIsPrefilledOrDecodedAsAsked) {
  EngineOptions eo;
  eo.model_dir = kRoot / "models/demo-code-28m";
  eo.max_context = 256;
  eo.max_sequences = 2;
  eo.threads = 1;
  Engine engine(eo);
  Corpus corpus = load_corpus({kRoot / "data/heldout-python"});
  EvalOptions o;
  o.tasks = {"passkey"};
  o.ctx = 200;
  o.lengths = {200};
  o.prompts = 1;
  o.keys = {1};
  uint64_t steps[2];
  for (bool dense : {true, false}) {
    o.question_dense = dense;
    EvalResults r = run_eval(engine, corpus, o);
    steps[dense] = r.policies[0].retrieval_work.steps;
  }
  // Prefilled up to its last token: one prompt step, then at most answer_tokens - 1 answer steps.
  EXPECT_LE(steps[true], uint64_t(o.answer_tokens));
  // Decoded: the question line's tokens (more than one) are decode steps too, the answer the same.
  EXPECT_GT(steps[false], steps[true]);
}

}  // namespace
}  // namespace skim::eval
