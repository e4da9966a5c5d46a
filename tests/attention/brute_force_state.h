// The brute-force attention state the reference kernels' tests compare with: o = softmax(scale
// q.k) v over n keys, in double, from bf16 rows (key(j), value(j)).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace skim::test {

struct BruteState {
  std::vector<double> o;
  double lse = 0;
};

template <class KeyRow, class ValueRow>
BruteState brute_force_state(const uint16_t* q, int d, float scale, int n, KeyRow key, ValueRow value) {
  std::vector<double> s;
  for (int j = 0; j < n; ++j) {
    const uint16_t* k = key(j);
    double dot = 0;
    for (int e = 0; e < d; ++e) dot += double(bf16_to_f32(q[e])) * bf16_to_f32(k[e]);
    s.push_back(scale * dot);
  }
  const double m = *std::max_element(s.begin(), s.end());
  double l = 0;
  for (double& x : s) l += (x = std::exp(x - m));
  BruteState r{std::vector<double>(size_t(d), 0.0), m + std::log(l)};
  for (int j = 0; j < n; ++j)
    for (int e = 0; e < d; ++e) r.o[size_t(e)] += s[size_t(j)] / l * bf16_to_f32(value(j)[e]);
  return r;
}

}  // namespace skim::test
