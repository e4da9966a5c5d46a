// Cosine k-means on separable synthetic data finds the clusters.
#include "attention/kmeans.h"

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

TEST(KMeans, NormalizeKeepsZero) {
  std::vector<float> z(8, 0.0f);
  EXPECT_EQ(normalize(z.data(), 8), 0.0f);
  for (float v : z) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace skim
