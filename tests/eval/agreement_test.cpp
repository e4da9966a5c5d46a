// Edit similarity and first divergence on known pairs; perplexity buckets on known losses.
#include "eval/agreement.h"

#include <gtest/gtest.h>

#include <cmath>

#include "eval/perplexity.h"

namespace skim::eval {
namespace {

using V = std::vector<int>;

TEST(Agreement, LevenshteinOnKnownPairs) {
  EXPECT_EQ(levenshtein(V{}, V{}), 0u);
  EXPECT_EQ(levenshtein(V{1, 2, 3}, V{1, 2, 3}), 0u);
  EXPECT_EQ(levenshtein(V{1, 2, 3}, V{}), 3u);
  EXPECT_EQ(levenshtein(V{1, 2, 3}, V{1, 3}), 1u);        // one deletion
  EXPECT_EQ(levenshtein(V{1, 2, 3}, V{1, 9, 3}), 1u);     // one substitution
  EXPECT_EQ(levenshtein(V{1, 2, 3, 4}, V{2, 3, 4, 5}), 2u);  // shifted by one
  // kitten -> sitting as ids: 3 edits.
  EXPECT_EQ(levenshtein(V{'k', 'i', 't', 't', 'e', 'n'}, V{'s', 'i', 't', 't', 'i', 'n', 'g'}), 3u);
}

TEST(Agreement, SimilarityAndDivergence) {
  EXPECT_DOUBLE_EQ(edit_similarity(V{}, V{}), 1.0);
  EXPECT_DOUBLE_EQ(edit_similarity(V{1, 2, 3, 4}, V{1, 2, 3, 4}), 1.0);
  EXPECT_DOUBLE_EQ(edit_similarity(V{1, 2, 3, 4}, V{5, 6, 7, 8}), 0.0);
  EXPECT_DOUBLE_EQ(edit_similarity(V{1, 2, 3, 4}, V{1, 2, 9, 4}), 0.75);
  EXPECT_DOUBLE_EQ(edit_similarity(V{'k', 'i', 't', 't', 'e', 'n'}, V{'s', 'i', 't', 't', 'i', 'n', 'g'}), 1 - 3.0 / 7);
  EXPECT_EQ(first_divergence(V{1, 2, 3, 4}, V{1, 2, 9, 4}), 2u);
  EXPECT_EQ(first_divergence(V{1, 2}, V{1, 2, 3}), 2u);
  EXPECT_EQ(first_divergence(V{7}, V{1}), 0u);

  AgreementTally t;
  t.add(V{1, 2, 3, 4}, V{1, 2, 3, 4});
  t.add(V{1, 2, 3, 4}, V{1, 2, 9, 4});
  EXPECT_DOUBLE_EQ(t.mean_first_divergence(), 3.0);
  EXPECT_DOUBLE_EQ(t.mean_similarity(), 0.875);
}

TEST(Perplexity, BucketsSplitTheWindowInOrder) {
  BucketedNll b(4);
  std::vector<double> nll = {1, 1, 2, 2, 3, 3, 4, 4};
  b.add(nll);
  std::vector<double> p = b.perplexity();
  ASSERT_EQ(p.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(p[size_t(k)], std::exp(k + 1.0), 1e-9);
  EXPECT_NEAR(b.overall(), std::exp(2.5), 1e-9);
}

TEST(Perplexity, TokenNllIsMinusLogSoftmax) {
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // probabilities 1/4, 3/4
  EXPECT_NEAR(token_nll(logits, 1), -std::log(0.75), 1e-6);
  EXPECT_NEAR(token_nll(logits, 0), -std::log(0.25), 1e-6);
}

}  // namespace
}  // namespace skim::eval
