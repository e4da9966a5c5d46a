#include "backend/cpu/kmeans.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace skim {

float normalize(float* v, int dim) {
  double s = 0;
  for (int i = 0; i < dim; ++i) s += double(v[i]) * v[i];
  float norm = float(std::sqrt(s));
  if (norm > 0)
    for (int i = 0; i < dim; ++i) v[i] /= norm;
  return norm;
}

namespace {

constexpr int kTile = 64;  // centroids scored at once: 4 AVX-512 (8 AVX2) accumulators

// Centroids transposed and padded with zero columns to whole tiles ([dim][tiles x kTile]), so
// a point's scores against one tile are kTile independent sums kept in registers, and the
// loop over the tile has a fixed length the compiler unrolls.
std::vector<float> transposed_tiles(const float* c, int k, int dim, int& width) {
  width = (k + kTile - 1) / kTile * kTile;
  std::vector<float> ct(size_t(dim) * width, 0.0f);
  for (int j = 0; j < k; ++j)
    for (int t = 0; t < dim; ++t) ct[size_t(t) * width + j] = c[size_t(j) * dim + t];
  return ct;
}

// acc[j] = x . c_(j0 + j) for one tile.
inline void tile_scores(const float* x, int dim, const float* ct, int width, int j0, float* acc) {
  for (int j = 0; j < kTile; ++j) acc[j] = 0.0f;
  for (int t = 0; t < dim; ++t) {
    const float xt = x[t];
    const float* row = ct + size_t(t) * width + j0;
#pragma omp simd
    for (int j = 0; j < kTile; ++j) acc[j] += xt * row[j];
  }
}

}  // namespace

void centroid_scores(const float* x, int n, int dim, const float* c, int k, float* s) {
  int width = 0;
  const std::vector<float> ct = transposed_tiles(c, k, dim, width);
  for (int i = 0; i < n; ++i)
    for (int j0 = 0; j0 < k; j0 += kTile) {
      alignas(64) float acc[kTile];
      tile_scores(x + size_t(i) * dim, dim, ct.data(), width, j0, acc);
      std::copy_n(acc, std::min(kTile, k - j0), s + size_t(i) * k + j0);
    }
}

namespace {

// Points stored by dimension and padded with zero points to whole tiles ([dim][width]), so
// the similarity of one vector with every point runs kTile points at a time in registers:
// k-means++ scores a few candidates against all points per seed.
struct PointsByDim {
  std::vector<float> v;
  int dim = 0, width = 0;

  PointsByDim(const float* x, int n, int d) : dim(d), width((n + kTile - 1) / kTile * kTile) {
    v.assign(size_t(dim) * width, 0.0f);
    for (int i = 0; i < n; ++i)
      for (int t = 0; t < dim; ++t) v[size_t(t) * width + i] = x[size_t(i) * dim + t];
  }
};

// s[i] = x_i . c for every point (padding included: 0).
void similarities(const PointsByDim& p, const float* c, float* s) {
  for (int i0 = 0; i0 < p.width; i0 += kTile) {
    alignas(64) float acc[kTile] = {};
    for (int t = 0; t < p.dim; ++t) {
      const float ct = c[t];
      const float* row = p.v.data() + size_t(t) * p.width + i0;
#pragma omp simd
      for (int j = 0; j < kTile; ++j) acc[j] += ct * row[j];
    }
    std::copy_n(acc, kTile, s + i0);
  }
}

// Each point's centroid: the largest dot product, the first of equal ones. Per tile of points,
// every centroid's scores are formed and compared in registers (running best and its index),
// which at the few dimensions of a subspace costs less than scoring then searching each row.
void assign_nearest(const PointsByDim& p, int n, const std::vector<float>& c, int k, std::vector<int>& assign) {
  for (int i0 = 0; i0 < p.width; i0 += kTile) {
    alignas(64) float best[kTile];
    alignas(64) int arg[kTile] = {};
    for (int i = 0; i < kTile; ++i) best[i] = -INFINITY;
    for (int j = 0; j < k; ++j) {
      const float* cj = c.data() + size_t(j) * p.dim;
      alignas(64) float acc[kTile] = {};
      for (int t = 0; t < p.dim; ++t) {
        const float ct = cj[t];
        const float* row = p.v.data() + size_t(t) * p.width + i0;
#pragma omp simd
        for (int i = 0; i < kTile; ++i) acc[i] += ct * row[i];
      }
#pragma omp simd
      for (int i = 0; i < kTile; ++i) {
        const bool better = acc[i] > best[i];
        best[i] = better ? acc[i] : best[i];
        arg[i] = better ? j : arg[i];
      }
    }
    std::copy_n(arg, std::min(kTile, n - i0), assign.data() + i0);
  }
}

constexpr int kSampleBlock = 64;  // points per partial sum of the D^2 sampling

// Squared cosine distance (1 - cos)^2 from a similarity.
inline float distance2(float sim) {
  const float d = std::max(0.0f, 1.0f - sim);
  return d * d;
}

// Greedy k-means++: the first seed uniformly; each next one the best of a few candidates drawn
// with probability D^2 (D the cosine distance to the nearest seed so far), best meaning the
// smallest total D^2 after adding it. One candidate per step (plain k-means++) put two seeds
// in one cluster now and then (1 run in 300 of the unit test's five clean clusters, seed
// 3259876513; none in 500 since); 2 + log k candidates, as scikit-learn draws.
void seed_plus_plus(const float* x, const PointsByDim& p, int n, int dim, int k, std::mt19937_64& rng,
                    std::vector<float>& c) {
  const int candidates = 2 + int(std::log(double(k)));
  // d2 of the padding points stays 0, so they are never drawn and add nothing.
  std::vector<float> d2(size_t(p.width), 0.0f), sim(size_t(candidates) * p.width);
  std::vector<double> block_sum(size_t(n + kSampleBlock - 1) / kSampleBlock);
  const int first = int(std::uniform_int_distribution<int>(0, n - 1)(rng));
  std::copy_n(x + size_t(first) * dim, dim, c.data());
  similarities(p, c.data(), sim.data());
  for (int i = 0; i < n; ++i) d2[size_t(i)] = distance2(sim[size_t(i)]);
  for (int j = 1; j < k; ++j) {
    // D^2 sampling over block sums: a draw walks the blocks, then one block.
    double total = 0;
    for (int b0 = 0, bi = 0; b0 < n; b0 += kSampleBlock, ++bi) {
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int i = b0; i < std::min(n, b0 + kSampleBlock); ++i) sum += d2[size_t(i)];
      block_sum[size_t(bi)] = sum;
      total += sum;
    }
    std::vector<int> picks(static_cast<size_t>(candidates));
    for (int& pick : picks) {
      if (total <= 0) {  // every point coincides with a seed: repeat one
        pick = int(std::uniform_int_distribution<int>(0, n - 1)(rng));
        continue;
      }
      double r = std::uniform_real_distribution<double>(0, total)(rng);
      size_t bi = 0;
      while (bi + 1 < block_sum.size() && r >= block_sum[bi]) r -= block_sum[bi++];
      pick = std::min(n, int(bi + 1) * kSampleBlock) - 1;
      for (int i = int(bi) * kSampleBlock; i < std::min(n, int(bi + 1) * kSampleBlock); ++i)
        if ((r -= d2[size_t(i)]) < 0) {
          pick = i;
          break;
        }
    }
    int best = 0;
    double best_total = 0;
    for (int t = 0; t < candidates; ++t) {
      float* s = sim.data() + size_t(t) * p.width;
      similarities(p, x + size_t(picks[size_t(t)]) * dim, s);
      double after = 0;
      for (int i0 = 0; i0 < p.width; i0 += kTile) {
        float part = 0;
#pragma omp simd reduction(+ : part)
        for (int i = i0; i < i0 + kTile; ++i) part += std::min(d2[size_t(i)], distance2(s[i]));
        after += part;
      }
      if (t == 0 || after < best_total) best = t, best_total = after;
    }
    std::copy_n(x + size_t(picks[size_t(best)]) * dim, dim, c.data() + size_t(j) * dim);
    const float* s = sim.data() + size_t(best) * p.width;
    float* d = d2.data();
#pragma omp simd
    for (int i = 0; i < n; ++i) d[i] = std::min(d[i], distance2(s[i]));
  }
}

// Normalised mean of each cluster's points; an empty cluster keeps its centroid.
void update_centroids(const float* x, int n, int dim, const std::vector<int>& assign, int k, std::vector<float>& c) {
  std::vector<double> sum(size_t(k) * dim, 0.0);
  for (int i = 0; i < n; ++i) {
    double* s = sum.data() + size_t(assign[size_t(i)]) * dim;
    const float* xi = x + size_t(i) * dim;
    for (int t = 0; t < dim; ++t) s[t] += xi[t];
  }
  for (int j = 0; j < k; ++j) {
    const double* s = sum.data() + size_t(j) * dim;
    double norm = 0;
    for (int t = 0; t < dim; ++t) norm += s[t] * s[t];
    if (norm <= 0) continue;
    norm = std::sqrt(norm);
    float* cj = c.data() + size_t(j) * dim;
    for (int t = 0; t < dim; ++t) cj[t] = float(s[t] / norm);
  }
}

}  // namespace

KMeansResult cosine_kmeans(const float* x, int n, int dim, int k, int iters, uint64_t seed) {
  SKIM_REQUIRE(n > 0 && dim > 0 && k > 0, "cosine_kmeans: n={}, dim={}, k={} must be positive", n, dim, k);
  KMeansResult r;
  r.k = k;
  r.dim = dim;
  r.centroids.assign(size_t(k) * dim, 0.0f);
  r.assign.assign(size_t(n), 0);
  std::mt19937_64 rng(seed);
  const PointsByDim p(x, n, dim);
  seed_plus_plus(x, p, n, dim, k, rng, r.centroids);
  for (int it = 0; it <= iters; ++it) {
    assign_nearest(p, n, r.centroids, k, r.assign);  // the last pass only assigns
    if (it < iters) update_centroids(x, n, dim, r.assign, k, r.centroids);
  }
  return r;
}

}  // namespace skim
