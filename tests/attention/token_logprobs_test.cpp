// cpu::token_logprobs (what the engine reports, and the CUDA kernel's oracle) against its
// definition by brute force: log-softmax in long double, the top alternatives by a full sort
// (ties to the lower id), rows with top_n < 0 untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "../test_random.h"
#include "backend/cpu/token_logprobs.h"

namespace skim {
namespace {

TEST(TokenLogprobs, LogSoftmaxOfTheTokenAndTheTopAlternatives) {
  for (int trial = 0; trial < 10; ++trial) {
    const int rows = 4, vocab = test::random_int(1, 3000);
    std::vector<float> logits = test::random_vector(size_t(rows) * vocab, 3.0f);
    for (size_t i = 0; i + 7 < logits.size(); i += 7) logits[i + 3] = logits[i];  // ties
    std::vector<int32_t> tokens, top_n = {0, 1, kMaxTopLogprobs, -1};
    for (int r = 0; r < rows; ++r) tokens.push_back(test::random_int(0, vocab - 1));
    std::vector<float> logprob(rows, 99.0f), top_lp(size_t(rows) * kMaxTopLogprobs, 99.0f);
    std::vector<int32_t> top_ids(top_lp.size(), -5);
    cpu::token_logprobs({.rows = rows, .vocab = vocab, .logits = logits.data(), .tokens = tokens.data(),
                         .top_n = top_n.data(), .logprob = logprob.data(), .top_ids = top_ids.data(),
                         .top_logprobs = top_lp.data()});
    for (int r = 0; r < rows; ++r) {
      const float* l = logits.data() + size_t(r) * vocab;
      if (top_n[size_t(r)] < 0) {
        EXPECT_EQ(logprob[size_t(r)], 99.0f) << "a row without logprobs is written";
        continue;
      }
      long double z = 0;
      for (int i = 0; i < vocab; ++i) z += std::exp((long double)l[i]);
      const double log_z = double(std::log(z));
      EXPECT_NEAR(logprob[size_t(r)], l[tokens[size_t(r)]] - log_z, 1e-4);
      std::vector<int> ids(static_cast<size_t>(vocab));
      std::iota(ids.begin(), ids.end(), 0);
      std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
      const int n = std::min(top_n[size_t(r)], vocab);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(top_ids[size_t(r) * kMaxTopLogprobs + i], ids[size_t(i)]) << "rank " << i;
        EXPECT_NEAR(top_lp[size_t(r) * kMaxTopLogprobs + i], l[ids[size_t(i)]] - log_z, 1e-4);
      }
      if (n < kMaxTopLogprobs) {
        EXPECT_EQ(top_ids[size_t(r) * kMaxTopLogprobs + n], -5);
      }
    }
  }
}

}  // namespace
}  // namespace skim
