// Random CSAttention tables for the cs_select tests (CPU against its definition, CUDA against
// the CPU): M x C unit centroids of ds dims, lists of up to L distinct random positions below
// `context` with random fp16 scores, random tails.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "attention/cs_kernel_args.h"
#include "core/dtype.h"
#include "test_random.h"

namespace skim::test {

struct CsTables {
  int M, C, ds, L;
  std::vector<float> centroids, tail;
  std::vector<int32_t> index, size;
  std::vector<uint16_t> score;
  CsTablesView view() const { return {centroids.data(), index.data(), score.data(), size.data(), tail.data()}; }
};

inline CsTables random_cs_tables(int M, int C, int ds, int L, int context) {
  CsTables t{M, C, ds, L, random_vector(size_t(M) * C * ds), random_vector(size_t(M) * C, 0.3f), {}, {}, {}};
  for (int l = 0; l < M * C; ++l) {  // unit centroids
    float* c = t.centroids.data() + size_t(l) * ds;
    double n = 0;
    for (int i = 0; i < ds; ++i) n += double(c[i]) * c[i];
    for (int i = 0; i < ds; ++i) c[i] = float(c[i] / std::sqrt(n));
  }
  t.index.assign(size_t(M) * C * L, -1);
  t.score.assign(t.index.size(), 0);
  t.size.assign(size_t(M) * C, 0);
  for (int l = 0; l < M * C; ++l) {
    t.size[size_t(l)] = random_int(0, std::min(L, context));
    std::vector<int32_t> keys(static_cast<size_t>(context));
    std::iota(keys.begin(), keys.end(), 0);
    std::shuffle(keys.begin(), keys.end(), rng());
    for (int i = 0; i < t.size[size_t(l)]; ++i) {
      t.index[size_t(l) * L + i] = keys[size_t(i)];
      t.score[size_t(l) * L + i] = f32_to_f16(random_vector(1)[0]);
    }
  }
  return t;
}

}  // namespace skim::test
