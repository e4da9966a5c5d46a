// Fresh random inputs for every run (never zeros): the seed is printed so a failure repeats
// with SKIM_TEST_SEED=<seed>.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

namespace skim::test {

inline uint64_t test_seed() {
  static uint64_t seed = [] {
    const char* env = std::getenv("SKIM_TEST_SEED");
    uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("[ seed     ] SKIM_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

inline std::mt19937_64& rng() {
  static std::mt19937_64 g(test_seed());
  return g;
}

inline std::vector<float> random_vector(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng());
  return v;
}

inline int random_int(int lo, int hi) {  // inclusive
  return std::uniform_int_distribution<int>(lo, hi)(rng());
}

}  // namespace skim::test
