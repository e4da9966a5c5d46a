// cuda::cs_insert against its CPU reference, cpu::cs_insert: a stream of keys offered one step
// at a time to the tables of several (sequence, group) units at once, each its own list capacity
// within one stride, with and without the admit cache, scores as dot products and as cosines. Centroids of sixteenths and key slices
// with one nonzero power of two make every score exact in any summation order, and many equal
// (the ties exercise the heap's rule), so the device's lists must equal the CPU's bit for bit.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>

#include "../test_random.h"
#include "backend/cpu/cs_kernels.h"
#include "backend/cuda/cs_insert.cuh"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

// One unit's lists, on the host.
struct Lists {
  std::vector<int32_t> index, size;
  std::vector<uint16_t> score;
  std::vector<int> admit;
  Lists(int lists, int L) : index(size_t(lists) * L, -1), size(size_t(lists), 0), score(size_t(lists) * L, 0),
                            admit(size_t(lists), INT_MIN) {}
};

TEST(CudaCsInsert, ListsEqualTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const int d = 64, M = 4, C = 16, ds = d / M, L = 24, units = 3, keys = 300;
  for (bool score_dot : {true, false})
    for (bool with_admit : {false, true}) {
      std::vector<float> centroids(size_t(M) * C * ds);
      for (float& x : centroids) x = float(test::random_int(-16, 16)) / 16.0f;
      std::vector<float> stream(size_t(units) * keys * d, 0.0f);  // [unit][key][d]
      for (size_t k = 0; k < size_t(units) * keys; ++k)
        for (int m = 0; m < M; ++m)
          stream[k * d + size_t(m) * ds + size_t(test::random_int(0, ds - 1))] =
              std::ldexp(test::random_int(0, 1) ? 1.0f : -1.0f, test::random_int(-1, 2));
      std::vector<Lists> cpu(units, Lists(M * C, L)), gpu(units, Lists(M * C, L));
      auto dcent = to_device(centroids);
      auto dstream = to_device(stream);
      std::vector<cuda::DeviceBuffer<int32_t>> index, size;
      std::vector<cuda::DeviceBuffer<uint16_t>> score;
      std::vector<cuda::DeviceBuffer<int>> admit;
      for (int u = 0; u < units; ++u) {
        index.push_back(to_device(gpu[u].index));
        size.push_back(to_device(gpu[u].size));
        score.push_back(to_device(gpu[u].score));
        admit.push_back(to_device(gpu[u].admit));
      }
      const CsInsertArgs shapes{.head_dim = d, .subspaces = M, .centroids = C, .list_capacity = L,
                                .score_dot = score_dot};
      cuda::DeviceBuffer<CsInsertArgs> dargs(units);
      for (int k = 0; k < keys; ++k) {
        std::vector<CsInsertArgs> step;
        for (int u = 0; u < units; ++u) {
          const size_t row = (size_t(u) * keys + k) * d;
          CsInsertArgs c = shapes;
          c.list_capacity = L - 4 * u;  // each unit its own capacity within one stride (the GPU policy's tables)
          c.list_stride = L;
          c.centroids_data = centroids.data();
          c.list_index = cpu[u].index.data();
          c.list_score = cpu[u].score.data();
          c.list_size = cpu[u].size.data();
          c.admit = with_admit ? cpu[u].admit.data() : nullptr;
          c.key = stream.data() + row;
          c.position = k;
          cpu::cs_insert(c);
          CsInsertArgs g = c;
          g.centroids_data = dcent.data();
          g.list_index = index[u].data();
          g.list_score = score[u].data();
          g.list_size = size[u].data();
          g.admit = with_admit ? admit[u].data() : nullptr;
          g.key = dstream.data() + row;
          step.push_back(g);
        }
        ASSERT_EQ(cudaMemcpy(dargs.data(), step.data(), step.size() * sizeof(CsInsertArgs), cudaMemcpyHostToDevice),
                  cudaSuccess);
        ASSERT_EQ(cuda::cs_insert(dargs.data(), units, shapes, nullptr), cudaSuccess);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (int u = 0; u < units; ++u) {
        EXPECT_EQ(to_host(size[u]), cpu[u].size) << "unit " << u << (score_dot ? " dot" : " cos");
        EXPECT_EQ(to_host(index[u]), cpu[u].index) << "unit " << u << ": the heaps' keys";
        EXPECT_EQ(to_host(score[u]), cpu[u].score) << "unit " << u << ": the heaps' scores";
        if (with_admit) {
          EXPECT_EQ(to_host(admit[u]), cpu[u].admit) << "unit " << u << ": the admit cache";
        }
      }
    }
}

TEST(CudaCsInsert, RefusesWhatItCannotRun) {
  CsInsertArgs s{.head_dim = 128, .subspaces = 3, .centroids = 64, .list_capacity = 10};
  EXPECT_EQ(cuda::cs_insert(nullptr, 0, s, nullptr), cudaErrorInvalidValue) << "head_dim not divisible";
  s.subspaces = 4;
  s.centroids = 512;
  EXPECT_EQ(cuda::cs_insert(nullptr, 0, s, nullptr), cudaErrorInvalidValue) << "more lists than a CTA's threads";
  s.centroids = 64;
  EXPECT_EQ(cuda::cs_insert(nullptr, 0, s, nullptr), cudaSuccess) << "nothing to insert";
}

}  // namespace
}  // namespace skim
