// Cosine k-means on separable synthetic data finds the clusters; its tiled products and its
// assignment equal their plain definitions on random inputs.
#include "backend/cpu/kmeans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "../test_random.h"

namespace skim {
namespace {

TEST(KMeans, FindsSeparableClusters) {
  const int dim = 16, k = 5, per = 200;
  // k well separated directions: the basis vectors e_0..e_4, then small noise.
  std::vector<float> x;
  std::vector<int> truth;
  for (int c = 0; c < k; ++c)
    for (int i = 0; i < per; ++i) {
      std::vector<float> v = test::random_vector(dim, 0.05f);
      v[size_t(c)] += 1.0f;
      normalize(v.data(), dim);
      x.insert(x.end(), v.begin(), v.end());
      truth.push_back(c);
    }
  KMeansResult r = cosine_kmeans(x.data(), k * per, dim, k, 10, test::test_seed());
  // Each true cluster goes to one centroid, and different clusters to different centroids.
  std::set<int> used;
  for (int c = 0; c < k; ++c) {
    int a = r.assign[size_t(c) * per];
    for (int i = 0; i < per; ++i) EXPECT_EQ(r.assign[size_t(c) * per + i], a) << "cluster " << c;
    used.insert(a);
    // The centroid points along the cluster's direction.
    EXPECT_GT(r.centroids[size_t(a) * dim + c], 0.99f);
  }
  EXPECT_EQ(int(used.size()), k);
  for (int j = 0; j < k; ++j) {  // unit length
    double n = 0;
    for (int t = 0; t < dim; ++t) n += double(r.centroids[size_t(j) * dim + t]) * r.centroids[size_t(j) * dim + t];
    EXPECT_NEAR(n, 1.0, 1e-5);
  }
}

TEST(KMeans, FewerPointsThanCentroids) {
  const int dim = 4;
  std::vector<float> x = {1, 0, 0, 0, 0, 1, 0, 0};
  KMeansResult r = cosine_kmeans(x.data(), 2, dim, 5, 3, 1);
  EXPECT_EQ(r.centroids.size(), size_t(5 * dim));
  EXPECT_NE(r.assign[0], r.assign[1]);
}

// s[i][j] = x_i . c_j, for sizes around the tile of 64 centroids and odd dimensions.
TEST(KMeans, CentroidScoresEqualDotProducts) {
  for (int k : {1, 5, 63, 64, 65, 130})
    for (int dim : {1, 3, 8, 16}) {
      const int n = test::random_int(1, 70);
      std::vector<float> x = test::random_vector(size_t(n) * dim), c = test::random_vector(size_t(k) * dim);
      std::vector<float> s(size_t(n) * k);
      centroid_scores(x.data(), n, dim, c.data(), k, s.data());
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < k; ++j) {
          double want = 0;
          for (int t = 0; t < dim; ++t) want += double(x[size_t(i) * dim + t]) * c[size_t(j) * dim + t];
          ASSERT_NEAR(s[size_t(i) * k + j], want, 1e-4) << "k " << k << " dim " << dim << " i " << i << " j " << j;
        }
    }
}

// The final assignment is each point's largest dot product with the returned centroids (the
// first on ties), whatever the tiling of points and centroids: the assigned centroid's score is
// the largest within the rounding of another summation order. (The check once kept a 1e-5
// hysteresis in its own argmax, the same as its tolerance: on the unit sphere of 2-16 dims, 100
// centroids leave scores 1e-5 apart, and float rounding of best + 1e-5 let the check's own
// maximum lag the true one by more than its tolerance; CI, seed 418488524.)
TEST(KMeans, AssignmentIsTheNearestCentroid) {
  for (int k : {3, 64, 100})
    for (int n : {1, 63, 64, 200}) {
      const int dim = test::random_int(2, 16);
      std::vector<float> x = test::random_vector(size_t(n) * dim);
      for (int i = 0; i < n; ++i) normalize(x.data() + size_t(i) * dim, dim);
      KMeansResult r = cosine_kmeans(x.data(), n, dim, k, 2, test::test_seed());
      for (int i = 0; i < n; ++i) {
        int best = 0;
        float best_s = -INFINITY;
        for (int j = 0; j < k; ++j) {
          float s = 0;
          for (int t = 0; t < dim; ++t) s += x[size_t(i) * dim + t] * r.centroids[size_t(j) * dim + t];
          if (s > best_s) best_s = s, best = j;
        }
        float got = 0;
        for (int t = 0; t < dim; ++t) got += x[size_t(i) * dim + t] * r.centroids[size_t(r.assign[size_t(i)]) * dim + t];
        EXPECT_NEAR(got, best_s, 1e-5f) << "k " << k << " n " << n << " point " << i << " (plain argmax " << best << ")";
      }
    }
}

TEST(KMeans, NormalizeKeepsZero) {
  std::vector<float> z(8, 0.0f);
  EXPECT_EQ(normalize(z.data(), 8), 0.0f);
  for (float v : z) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace skim
