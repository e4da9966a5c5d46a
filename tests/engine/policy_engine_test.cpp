// Policies inside the engine: at full budget every policy equals dense, and ReSA's
// rectification with f = 1 leaves exactly the KV cache dense decoding writes.
#include <gtest/gtest.h>

#include <cmath>

#include "tiny_engine.h"
#include "kv/paged_kv_cache.h"
#include "model/config.h"
#include "core/error.h"
#include "skim/engine.h"

namespace skim {
namespace {

struct PolicyRun {
  std::unique_ptr<Engine> engine;
  int seq = 0;
  std::vector<std::vector<float>> logits;  // per decode step
};

// Prefill `prompt`, then teacher-force `feed` one decode step at a time.
PolicyRun run_policy(const std::string& policy, const std::vector<int>& prompt, const std::vector<int>& feed) {
  PolicyRun r;
  r.engine = test::make_tiny_engine(policy, int(prompt.size() + feed.size()) + 8);
  r.seq = r.engine->open_sequence();
  r.engine->append(r.seq, prompt, {});
  r.logits = test::decode_each(*r.engine, r.seq, feed);
  return r;
}

std::vector<int> random_ids(int n, int vocab) {
  std::vector<int> v(n);
  for (int& x : v) x = test::random_int(0, vocab - 1);
  return v;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Largest difference between two sequences' caches over all layers, positions and heads.
float kv_diff(const Engine& ea, int sa, const Engine& eb, int sb) {
  const PagedKVCache& ca = ea.kv_cache();
  const PagedKVCache& cb = eb.kv_cache();
  const PageTable& ta = ea.page_table(sa);
  const PageTable& tb = eb.page_table(sb);
  const KVCacheShape& s = ca.shape();
  float m = 0;
  for (int l = 0; l < s.num_layers; ++l)
    for (int p = 0; p < ta.length; ++p)
      for (int h = 0; h < s.num_kv_heads; ++h)
        for (int i = 0; i < s.head_dim; ++i) {
          m = std::max(m, std::fabs(ca.key(l, ta, p, h)[i] - cb.key(l, tb, p, h)[i]));
          m = std::max(m, std::fabs(ca.value(l, ta, p, h)[i] - cb.value(l, tb, p, h)[i]));
        }
  return m;
}
float kv_diff(const PolicyRun& a, const PolicyRun& b) { return kv_diff(*a.engine, a.seq, *b.engine, b.seq); }

TEST(PolicyEngine, FullBudgetEqualsDense) {
  auto prompt = random_ids(300, 512), feed = random_ids(12, 512);
  PolicyRun dense = run_policy("dense", prompt, feed);
  for (const char* spec : {"quest:budget=1.0,dense_layers=0", "quest:budget=100000", "gbsa:keep=1",
                           "streaming:sink=0,window=100000", "resa:keep=1,f=4"}) {
    PolicyRun r = run_policy(spec, prompt, feed);
    for (size_t i = 0; i < feed.size(); ++i)
      EXPECT_LT(max_diff(r.logits[i], dense.logits[i]), 1e-5f) << spec << " step " << i;
  }
}

TEST(PolicyEngine, SparseDecodingChangesTheCacheAndRectifyF1RestoresIt) {
  auto prompt = random_ids(400, 512), feed = random_ids(10, 512);
  PolicyRun dense = run_policy("dense", prompt, feed);
  PolicyRun sparse = run_policy("gbsa:keep=0.02,n_min=1,n_local=1", prompt, feed);
  PolicyRun rect = run_policy("gbsa:keep=0.02,n_min=1,n_local=1+rectify:f=1", prompt, feed);
  EXPECT_GT(kv_diff(sparse, dense), 1e-3f);  // the sparse policy does change the cache
  EXPECT_LE(kv_diff(rect, dense), 1e-5f);  // prefill and decode kernels sum in different orders
  EXPECT_EQ(rect.engine->rectified_tokens(), feed.size());
}

TEST(PolicyEngine, RectifyEveryFRewritesTheLastFTokens) {
  auto prompt = random_ids(200, 512), feed = random_ids(9, 512);
  PolicyRun dense = run_policy("dense", prompt, feed);
  PolicyRun rect = run_policy("gbsa:keep=0.02,n_min=1,n_local=1+rectify:f=3", prompt, feed);
  // 9 decode steps with f = 3: three rectifications, and the last one just ran, so the whole
  // cache is dense again.
  EXPECT_EQ(rect.engine->rectified_tokens(), 9u);
  EXPECT_LE(kv_diff(rect, dense), 1e-5f);  // prefill and decode kernels sum in different orders
}

// Sequences due in the same step rectify in shared passes (f = 3: one pass of 9 rows; f = 40: 120
// rows over two passes of 64, a sequence split between them): after a step that rectified, each
// sequence's cache is the one dense decoding writes, as when it runs alone.
TEST(PolicyEngine, SequencesDueTogetherRectifyInSharedPasses) {
  for (int f : {3, 40}) {
    SCOPED_TRACE(testing::Message() << "f " << f);
    const std::vector<std::vector<int>> prompts = {random_ids(200, 512), random_ids(90, 512), random_ids(131, 512)};
    const std::vector<int> feed = random_ids(f, 512);
    const int n = int(prompts.size());
    auto e = test::make_tiny_engine("gbsa:keep=0.02,n_min=1,n_local=1+rectify:f=" + std::to_string(f), 200 + f + 8, n);
    std::vector<int> seqs;
    for (const auto& p : prompts) {
      seqs.push_back(e->open_sequence());
      e->append(seqs.back(), p, {});
    }
    for (int t : feed) e->decode(seqs, std::vector<int>(size_t(n), t));
    EXPECT_EQ(e->rectified_tokens(), uint64_t(n * f));
    EXPECT_EQ(e->rectification_passes(), f == 3 ? 1u : 2u) << "one pass, or two of at most 64 rows";
    for (int r = 0; r < n; ++r) {
      PolicyRun dense = run_policy("dense", prompts[size_t(r)], feed);
      EXPECT_LE(kv_diff(*e, seqs[size_t(r)], *dense.engine, dense.seq), 1e-5f) << "sequence " << r;
    }
  }
}

// Sequences that started at different steps fall into step: when one is due (f = 4), another at
// least half-way (2 of 4) joins its rectification, and from then on they rectify together. After
// the last step, which rectified both, each cache is the one dense decoding writes (without the
// join, the second's last two tokens would still be sparse-written).
TEST(PolicyEngine, SequencesHalfWayJoinARectificationAndStayInStep) {
  const std::vector<int> prompt_a = random_ids(150, 512), prompt_b = random_ids(120, 512);
  const std::vector<int> solo = random_ids(2, 512), together = random_ids(6, 512);
  auto e = test::make_tiny_engine("gbsa:keep=0.02,n_min=1,n_local=1+rectify:f=4", 200, 2);
  const int a = e->open_sequence();
  e->append(a, prompt_a, {});
  for (int t : solo) e->decode(std::span<const int>(&a, 1), std::span<const int>(&t, 1));
  const int b = e->open_sequence();
  e->append(b, prompt_b, {});
  const std::vector<int> both = {a, b};
  for (int t : together) e->decode(both, std::vector<int>{t, t});
  // a: 4 tokens at the 2nd joint step, 4 at the 6th; b: 2 (joining) and 4: two passes (apart,
  // a and b would have taken three).
  EXPECT_EQ(e->rectified_tokens(), 14u);
  EXPECT_EQ(e->rectification_passes(), 2u);
  std::vector<int> feed_a = solo;
  feed_a.insert(feed_a.end(), together.begin(), together.end());
  PolicyRun dense_a = run_policy("dense", prompt_a, feed_a), dense_b = run_policy("dense", prompt_b, together);
  EXPECT_LE(kv_diff(*e, a, *dense_a.engine, dense_a.seq), 1e-5f);
  EXPECT_LE(kv_diff(*e, b, *dense_b.engine, dense_b.seq), 1e-5f);
}

// The CPU engine runs one policy for every sequence: a sequence's own policy is the engine's,
// asking another is refused, and set_policy moves every sequence (rectification included).
TEST(PolicyEngine, OnTheCpuEverySequenceRunsTheEnginesPolicy) {
  auto e = test::make_tiny_engine("gbsa:keep=0.5", 256);
  EXPECT_FALSE(e->mixes_policies());
  const int s = e->open_sequence();
  EXPECT_EQ(e->sequence_policy(s), "gbsa:keep=0.5");
  EXPECT_NO_THROW(e->set_sequence_policy(s, "gbsa:keep=0.5"));
  EXPECT_THROW(e->set_sequence_policy(s, "dense"), Error);
  auto prompt = random_ids(100, 512), feed = random_ids(6, 512);
  e->append(s, prompt, {});
  e->set_policy("resa:keep=0.5,f=3");
  EXPECT_EQ(e->sequence_policy(s), "resa:keep=0.5,f=3");
  for (int t : feed) e->decode(std::span<const int>(&s, 1), std::span<const int>(&t, 1));
  EXPECT_EQ(e->rectified_tokens(), 6u);
}

}  // namespace
}  // namespace skim
