// cuda::cs_build against its definition (attention/cs_kernel_args.h), computed here from the
// centroids it returns, and its k-means against the CPU's: prompt vectors in 6 clusters per
// subspace plus noise, bf16 keys in shuffled pages, both subspaces of a group's tables in one
// call, dot and cosine scores, lists shorter than the prompt and longer. The device draws its
// seeds from another random stream than the CPU, so its centroids are not the CPU's: they must
// be unit vectors that fit the points as well as the CPU's k-means does. Given them, each list
// must hold the top-L keys by score (ties to the smaller position; near-ties of fp32 order
// reported and bounded), their fp16 scores, in a valid heap, with the tail of the keys left out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "../shuffled_pages.h"
#include "../test_random.h"
#include "attention/top_list_heap.h"
#include "backend/cpu/kmeans.h"
#include "backend/cuda/cs_build.cuh"
#include "core/dtype.h"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

// Mean over the points of their best cosine to the centroids.
double fit(const std::vector<float>& points, int n, int ds, const float* centroids, int k) {
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    float best = -INFINITY;
    for (int c = 0; c < k; ++c) {
      float s = 0;
      for (int t = 0; t < ds; ++t) s += points[size_t(i) * ds + t] * centroids[size_t(c) * ds + t];
      best = std::max(best, s);
    }
    sum += best;
  }
  return sum / n;
}

TEST(CudaCsBuild, ListsFollowTheDefinitionAndKMeansFitsAsTheCpus) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const int d = 64, M = 2, ds = d / M, C = 8, L = 60, iters = 8, max_points = 600, hkv = 2, kvh = 1, ps = 16;
  for (bool score_dot : {true, false})
    for (int num_keys : {1000, 40}) {
      const int num_vectors = 900;
      // Vectors near 6 random directions per subspace.
      std::vector<float> centers = test::random_vector(size_t(M) * 6 * ds), vectors(size_t(num_vectors) * d);
      for (int i = 0; i < num_vectors; ++i)
        for (int m = 0; m < M; ++m) {
          const int which = test::random_int(0, 5);
          const std::vector<float> noise = test::random_vector(size_t(ds), 0.1f);
          for (int t = 0; t < ds; ++t)
            vectors[size_t(i) * d + size_t(m) * ds + t] = centers[(size_t(m) * 6 + which) * ds + t] + noise[size_t(t)];
        }
      const test::ShuffledPages pages = test::shuffled_pages({num_keys}, ps, 3, 2, test::rng());
      std::vector<uint16_t> pool(size_t(pages.num_pages) * hkv * ps * d);
      for (uint16_t& x : pool) x = f32_to_bf16(test::random_vector(1)[0]);
      auto key = [&](int j, int t) {  // element t of key j, as the device reads it
        const size_t row = (size_t(pages.table[size_t(j / ps)]) * hkv + kvh) * ps + j % ps;
        return bf16_to_f32(pool[row * d + t]);
      };

      auto dvec = to_device(vectors);
      auto dpool = to_device(pool);
      auto dpages = to_device(std::vector<int32_t>(pages.table.begin(), pages.table.begin() + (num_keys + ps - 1) / ps));
      cuda::DeviceBuffer<float> cent(size_t(M) * C * ds), tail(size_t(M) * C);
      const int LS = L + 5;  // lists LS apart: a stride past the capacity, as the GPU policy's tables
      cuda::DeviceBuffer<int32_t> index(size_t(M) * C * LS), size(size_t(M) * C);
      cuda::DeviceBuffer<uint16_t> score(size_t(M) * C * LS);
      const CsBuildArgsBf16 shapes{.head_dim = d, .subspaces = M, .centroids = C, .iters = iters,
                                   .max_points = max_points, .list_capacity = L, .list_stride = LS,
                                   .score_dot = score_dot};
      std::vector<CsBuildArgsBf16> builds;
      for (int m = 0; m < M; ++m) {
        CsBuildArgsBf16 b = shapes;
        b.subspace = m;
        b.vectors = dvec.data();
        b.num_vectors = num_vectors;
        b.k_pool = dpool.data();
        b.pages = dpages.data();
        b.page_size = ps;
        b.num_kv_heads = hkv;
        b.kv_head = kvh;
        b.num_keys = num_keys;
        b.centroids_out = cent.data();
        b.list_index = index.data();
        b.list_score = score.data();
        b.list_size = size.data();
        b.tail = tail.data();
        builds.push_back(b);
      }
      auto dbuilds = to_device(builds);
      const size_t ws_bytes = cuda::cs_build_workspace_size(shapes, M, num_keys);
      ASSERT_GT(ws_bytes, 0u);
      cuda::DeviceBuffer<uint8_t> ws(ws_bytes);
      ASSERT_EQ(cuda::cs_build(dbuilds.data(), M, shapes, num_keys, {ws.data(), ws_bytes}, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> got_cent = to_host(cent), got_tail = to_host(tail);
      std::vector<int32_t> got_index = to_host(index), got_size = to_host(size);  // heap views below
      std::vector<uint16_t> got_score = to_host(score);

      for (int m = 0; m < M; ++m) {
        // The points: every stride-th vector's slice, normalised.
        const int stride = (num_vectors + max_points - 1) / max_points, n = (num_vectors + stride - 1) / stride;
        std::vector<float> points(size_t(n) * ds);
        for (int i = 0; i < n; ++i) {
          std::copy_n(vectors.data() + size_t(i) * stride * d + size_t(m) * ds, ds, points.data() + size_t(i) * ds);
          normalize(points.data() + size_t(i) * ds, ds);
        }
        const float* c = got_cent.data() + size_t(m) * C * ds;
        for (int j = 0; j < C; ++j) {
          double n2 = 0;
          for (int t = 0; t < ds; ++t) n2 += double(c[size_t(j) * ds + t]) * c[size_t(j) * ds + t];
          EXPECT_NEAR(std::sqrt(n2), 1.0, 1e-4) << "centroid " << j << " of subspace " << m;
        }
        const KMeansResult cpu = cosine_kmeans(points.data(), n, ds, C, iters, 0x5eed0000u + uint64_t(m));
        const double gpu_fit = fit(points, n, ds, c, C), cpu_fit = fit(points, n, ds, cpu.centroids.data(), C);
        std::printf("[ cs build ] subspace %d: mean best cosine %.4f on the GPU, %.4f with the CPU's k-means\n", m,
                    gpu_fit, cpu_fit);
        EXPECT_GE(gpu_fit, cpu_fit - 0.02) << "subspace " << m;

        int differ = 0, score_differ = 0, listed = 0;
        for (int j = 0; j < C; ++j) {
          const size_t l = size_t(m) * C + j;
          std::vector<float> s(static_cast<size_t>(num_keys));
          double all = 0;
          for (int k = 0; k < num_keys; ++k) {
            double n2 = 0;
            for (int t = 0; t < ds; ++t) n2 += double(key(k, m * ds + t)) * key(k, m * ds + t);
            const float norm = float(std::sqrt(n2));
            float v = 0;
            for (int t = 0; t < ds; ++t) {
              const float x = key(k, m * ds + t);
              v += c[size_t(j) * ds + t] * (!score_dot && norm > 0 ? x / norm : x);
            }
            s[size_t(k)] = v;
            all += v;
          }
          std::vector<int32_t> order(static_cast<size_t>(num_keys));
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(),
                           [&](int32_t x, int32_t y) { return s[size_t(x)] > s[size_t(y)]; });
          const int kept = std::min(L, num_keys);
          ASSERT_EQ(got_size[l], kept) << "list " << l;
          std::vector<int32_t> want(order.begin(), order.begin() + kept);
          std::vector<int32_t> got(got_index.begin() + std::ptrdiff_t(l) * LS,
                                   got_index.begin() + std::ptrdiff_t(l) * LS + kept);
          double in = 0;
          for (int32_t k : want) in += s[size_t(k)];
          const float want_tail = kept < num_keys ? float((all - in) / (num_keys - kept)) : 0.0f;
          EXPECT_NEAR(got_tail[l], want_tail, 1e-5 + 1e-4 * std::fabs(want_tail)) << "list " << l;
          for (int i = 0; i < kept; ++i) {
            const int32_t k = got[size_t(i)];
            ASSERT_TRUE(k >= 0 && k < num_keys) << "list " << l;
            score_differ += got_score[l * LS + i] != f32_to_f16(s[size_t(k)]);
          }
          const top_list::Heap heap{got_index.data() + l * LS, got_score.data() + l * LS, got_size.data() + l, L};
          for (int i = 1; i < kept; ++i)
            ASSERT_FALSE(heap.below(size_t(i), size_t((i - 1) / 2))) << "list " << l << " is not a min-heap";
          std::sort(want.begin(), want.end());
          std::sort(got.begin(), got.end());
          std::vector<int32_t> diff;
          std::set_symmetric_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(diff));
          differ += int(diff.size());
          listed += kept;
        }
        std::printf("[ cs build ] subspace %d (%s, %d keys): %d of %d list entries differ from the definition "
                    "(near-ties), %d fp16 scores\n",
                    m, score_dot ? "dot" : "cos", num_keys, differ, listed, score_differ);
        EXPECT_LE(differ, std::max(2, listed / 100));
        EXPECT_LE(score_differ, std::max(2, listed / 100));
      }
    }
}

TEST(CudaCsBuild, RefusesWhatItCannotRun) {
  CsBuildArgsBf16 a{.head_dim = 128, .subspaces = 3, .centroids = 64, .iters = 4, .max_points = 100,
                    .list_capacity = 10};
  EXPECT_EQ(cuda::cs_build_workspace_size(a, 1, 100), 0u) << "head_dim not divisible";
  a.subspaces = 1;
  a.centroids = 256;
  EXPECT_EQ(cuda::cs_build_workspace_size(a, 1, 100), 0u) << "the Lloyd sums exceed a CTA's shared memory";
  a.subspaces = 4;
  a.centroids = 64;
  EXPECT_GT(cuda::cs_build_workspace_size(a, 1, 100), 0u);
  EXPECT_EQ(cuda::cs_build(nullptr, 1, a, 100, {nullptr, 0}, nullptr), cudaErrorInvalidValue) << "no builds";
}

}  // namespace
}  // namespace skim
