// Cosine k-means (spherical k-means) with k-means++ seeding, the clustering CSAttention runs
// on the prefill queries of each subspace. Points and centroids live on the unit sphere:
// assignment is by the largest dot product, a centroid is the normalised mean of its points.
#pragma once

#include <cstdint>
#include <vector>

namespace skim {

struct KMeansResult {
  int k = 0, dim = 0;
  std::vector<float> centroids;  // [k][dim], unit length (zero only if every point is zero)
  std::vector<int> assign;       // [n]: index of each point's centroid
};

// Scales v[0..dim) to unit length in place; a zero vector stays zero. Returns the old norm.
float normalize(float* v, int dim);

// s[i][j] = x_i . c_j for points x [n][dim] and centroids c [k][dim]: the product X C^T that
// k-means assignment and CSAttention's list scoring are made of.
void centroid_scores(const float* x, int n, int dim, const float* c, int k, float* s);

// points: [n][dim], already unit length (see normalize). k-means++ seeds with probability
// proportional to the squared cosine distance (1 - cos)^2, then `iters` Lloyd iterations.
// With fewer distinct points than k the extra centroids repeat chosen points. Deterministic
// for a given seed.
KMeansResult cosine_kmeans(const float* points, int n, int dim, int k, int iters, uint64_t seed);

}  // namespace skim
