// Tensor parallelism's pieces: the in-process communicator against the definition of its
// collectives, and the shard plan and weights against the whole model.
#include <gtest/gtest.h>

#include <thread>

#include "../test_random.h"
#include "backend/cpu/thread_communicator.h"
#include "core/error.h"
#include "model/model.h"
#include "model/tensor_shard.h"

namespace skim {
namespace {

const std::filesystem::path kRoot = SKIM_SOURCE_DIR;

// Runs fn(rank, communicator) on one thread per rank.
void on_ranks(int n, const std::function<void(int, Communicator&)>& fn) {
  auto comms = make_thread_communicators(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r, *comms[size_t(r)]); });
  for (auto& t : threads) t.join();
}

TEST(ThreadCommunicator, AllReduceSumsInRankOrderOnEveryRank) {
  for (int n : {1, 2, 3, 4}) {
    for (size_t count : {size_t(1), size_t(7), size_t(1000)}) {  // shares of unequal size too
      std::vector<std::vector<float>> data;
      for (int r = 0; r < n; ++r) data.push_back(test::random_vector(count));
      std::vector<float> expect(count, 0.0f);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) expect[i] += data[size_t(r)][i];
      std::vector<std::vector<float>> out = data;
      on_ranks(n, [&](int r, Communicator& c) {
        EXPECT_EQ(c.rank(), r);
        EXPECT_EQ(c.size(), n);
        for (int repeat = 0; repeat < 3; ++repeat) {  // the barrier serves call after call
          std::vector<float> buf = data[size_t(r)];
          c.all_reduce_sum(buf.data(), count);
          if (repeat == 2) out[size_t(r)] = buf;
        }
      });
      for (int r = 0; r < n; ++r) EXPECT_EQ(out[size_t(r)], expect) << n << " ranks, " << count << " floats";
    }
  }
}

TEST(ThreadCommunicator, AllGatherLaysTheRanksSideBySide) {
  const int n = 3;
  const size_t count = 5;
  std::vector<std::vector<float>> data, got(n);
  for (int r = 0; r < n; ++r) data.push_back(test::random_vector(count));
  on_ranks(n, [&](int r, Communicator& c) {
    got[size_t(r)].resize(n * count);
    c.all_gather(data[size_t(r)].data(), count, got[size_t(r)].data());
  });
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < n; ++s)
      EXPECT_TRUE(std::equal(data[size_t(s)].begin(), data[size_t(s)].end(), got[size_t(r)].begin() + s * count));
}

TEST(TensorShard, SplitsWholeGroupsOrReplicatesAKvHead) {
  const ModelConfig c = load_model_config(kRoot / "tests/fixtures/models/tiny-llama3");  // 4 heads, 2 KV
  const TensorShard a = plan_tensor_shard(c, 1, 2);
  EXPECT_EQ(a.q_head_begin, 2);
  EXPECT_EQ(a.q_heads, 2);
  EXPECT_EQ(a.kv_head_begin, 1);
  EXPECT_EQ(a.kv_heads, 1);
  EXPECT_FALSE(a.replicated());
  EXPECT_EQ(a.attn_heads, 2);
  const TensorShard b = plan_tensor_shard(c, 3, 4);  // 2 ranks per KV head
  EXPECT_EQ(b.q_head_begin, 3);
  EXPECT_EQ(b.q_heads, 1);
  EXPECT_EQ(b.kv_head_begin, 1);
  EXPECT_TRUE(b.replicated());
  EXPECT_EQ(b.kv_group_ranks, 2);
  EXPECT_EQ(b.attn_head_begin, 2);
  EXPECT_EQ(b.attn_heads, 2);
  EXPECT_EQ(b.own_head_offset(), 1);
  int vocab = 0, inter = 0;
  for (int r = 0; r < 4; ++r) {
    const TensorShard s = plan_tensor_shard(c, r, 4);
    EXPECT_EQ(s.vocab_begin, vocab);
    EXPECT_EQ(s.inter_begin, inter);
    vocab += s.vocab;
    inter += s.inter;
  }
  EXPECT_EQ(vocab, c.vocab_size);
  EXPECT_EQ(inter, c.intermediate_size);
}

TEST(TensorShard, RefusesHeadsThatDoNotSplitNamingTheFlag) {
  ModelConfig c = load_model_config(kRoot / "tests/fixtures/models/tiny-llama3");
  try {
    plan_tensor_shard(c, 0, 3);
    FAIL() << "4 heads over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("num_attention_heads"), std::string::npos) << e.what();
  }
  c.num_heads = 24;
  c.num_kv_heads = 4;  // 6 ranks: 4 KV heads neither split nor replicate evenly
  try {
    plan_tensor_shard(c, 0, 6);
    FAIL() << "4 KV heads over 6 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads"), std::string::npos) << e.what();
  }
}

// The shards' slices put back together are the whole model's weights.
TEST(TensorShard, ShardsTogetherHoldTheWholeModel) {
  auto full = load_model(kRoot / "tests/fixtures/models/tiny-qwen2");  // q/k/v biases, tied embedding
  const ModelConfig& c = full->config;
  const int d = c.head_dim, n = 2;
  std::vector<std::unique_ptr<Model>> shards;
  for (int r = 0; r < n; ++r) shards.push_back(shard_model(*full, plan_tensor_shard(c, r, n)));
  const LayerWeights& w = full->weights.layers[1];
  for (int r = 0; r < n; ++r) {
    const LayerWeights& s = shards[size_t(r)]->weights.layers[1];
    const int q0 = r * (c.num_heads / n) * d, k0 = r * (c.num_kv_heads / n) * d, i0 = r * (c.intermediate_size / n);
    EXPECT_EQ(shards[size_t(r)]->config.num_heads, c.num_heads / n);
    for (int i = 0; i < s.wq.rows; ++i)
      for (int j = 0; j < c.hidden_size; ++j) EXPECT_EQ(s.wq.at(size_t(i) * s.wq.cols + j), w.wq.at(size_t(q0 + i) * w.wq.cols + j));
    for (int i = 0; i < s.wk.rows; ++i) EXPECT_EQ(s.bk[size_t(i)], w.bk[size_t(k0 + i)]);
    for (int i = 0; i < c.hidden_size; ++i)
      for (int j = 0; j < s.wo.cols; ++j) EXPECT_EQ(s.wo.at(size_t(i) * s.wo.cols + j), w.wo.at(size_t(i) * w.wo.cols + q0 + j));
    for (int i = 0; i < c.hidden_size; ++i)
      for (int j = 0; j < s.w_down.cols; ++j)
        EXPECT_EQ(s.w_down.at(size_t(i) * s.w_down.cols + j), w.w_down.at(size_t(i) * w.w_down.cols + i0 + j));
    const Matrix& e = shards[size_t(r)]->weights.output();  // tied: the embedding's rows
    EXPECT_EQ(e.rows, (c.vocab_size + n - 1) / n);  // padded to the stride
    EXPECT_EQ(e.at(0), full->weights.embed.at(size_t(r) * (c.vocab_size / n) * c.hidden_size));
  }
}

}  // namespace
}  // namespace skim
