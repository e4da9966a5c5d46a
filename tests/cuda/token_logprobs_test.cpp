// cuda::token_logprobs against its CPU reference (cpu::token_logprobs) on fresh random logits
// with ties, vocabularies from 1 to Llama 3's 128256 tokens: the same top ids in the same order
// (ties to the lower id), log-probabilities within float rounding of the double-summed log Z,
// rows with top_n < 0 untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../test_random.h"
#include "backend/cpu/token_logprobs.h"
#include "backend/cuda/token_logprobs.cuh"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

TEST(CudaTokenLogprobs, MatchTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int vocab : {1, 7, 1000, 49152, 128256}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const int rows = 5;
    std::vector<float> logits = test::random_vector(size_t(rows) * vocab, 4.0f);
    for (size_t i = 0; i + 11 < logits.size(); i += 11) logits[i + 5] = logits[i];  // ties
    std::vector<int32_t> tokens, top_n = {0, 1, 5, kMaxTopLogprobs, -1};
    for (int r = 0; r < rows; ++r) tokens.push_back(test::random_int(0, vocab - 1));
    const size_t top = size_t(rows) * kMaxTopLogprobs;
    std::vector<float> want_lp(rows, 7.0f), want_top(top, 7.0f);
    std::vector<int32_t> want_ids(top, -3);
    cpu::token_logprobs({.rows = rows, .vocab = vocab, .logits = logits.data(), .tokens = tokens.data(),
                         .top_n = top_n.data(), .logprob = want_lp.data(), .top_ids = want_ids.data(),
                         .top_logprobs = want_top.data()});

    auto d_logits = test::to_device(logits);
    auto d_tokens = test::to_device(tokens), d_top_n = test::to_device(top_n);
    auto d_lp = test::to_device(std::vector<float>(rows, 7.0f)), d_top = test::to_device(std::vector<float>(top, 7.0f));
    auto d_ids = test::to_device(std::vector<int32_t>(top, -3));
    ASSERT_EQ(cuda::token_logprobs({.rows = rows, .vocab = vocab, .logits = d_logits.data(), .tokens = d_tokens.data(),
                                    .top_n = d_top_n.data(), .logprob = d_lp.data(), .top_ids = d_ids.data(),
                                    .top_logprobs = d_top.data()},
                                   nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> lp = test::to_host(d_lp), top_values = test::to_host(d_top);
    const std::vector<int32_t> ids = test::to_host(d_ids);
    EXPECT_EQ(ids, want_ids);  // untouched slots and rows included
    for (int r = 0; r < rows; ++r) EXPECT_NEAR(lp[size_t(r)], want_lp[size_t(r)], 1e-4) << "row " << r;
    for (size_t i = 0; i < top; ++i) EXPECT_NEAR(top_values[i], want_top[i], 1e-4) << "slot " << i;
  }
}

}  // namespace
}  // namespace skim
