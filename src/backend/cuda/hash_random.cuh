// Counter-based random numbers on the device: draw i of stream `seed` is a hash of the two
// (splitmix64), so any thread draws any number without state. Benchmark fills (ops.cu) and
// the table build's k-means seeds (cs_build.cu).
#pragma once

#include <cstdint>

namespace skim::cuda {

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Draw `draw` of stream `seed`: 64 random bits.
__device__ __forceinline__ uint64_t draw_bits(uint64_t seed, uint64_t draw) {
  return splitmix64(seed * 0x100000001b3ull + draw);
}

// The same draw as a double uniform in [0, 1).
__device__ __forceinline__ double draw_unit(uint64_t seed, uint64_t draw) {
  return double(draw_bits(seed, draw) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace skim::cuda
