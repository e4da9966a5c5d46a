// A thread's share of a row's maximum and its first index (greedy decoding's argmax, the
// sampler's first pass): the row's elements i = threadIdx.x, + blockDim.x, ... in 16-byte loads
// four at a time, several loads in flight (one element a load, each waiting on the last, held a
// 128K-vocabulary row on one SM for about 30 us). The block then reduces (max, then the least
// index of it). NaN is never the maximum; a row without a number leaves idx at `n`.
#pragma once

#include <cstdint>

namespace skim::cuda {

__device__ __forceinline__ void take_max(float v, int i, float& best, int& idx) {
  if (v > best) best = v, idx = i;
}

__device__ __forceinline__ void thread_row_max(const float* row, int n, float& best, int& idx) {
  best = -INFINITY;
  idx = n;
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0) {  // float4s c = tid, tid + threads, ...
    const float4* r4 = reinterpret_cast<const float4*>(row);
    const int n4 = n / 4, threads = int(blockDim.x);
    int c = threadIdx.x;
    for (; c + 3 * threads < n4; c += 4 * threads) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = r4[c + u * threads];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int at = 4 * (c + u * threads);
        take_max(v[u].x, at, best, idx), take_max(v[u].y, at + 1, best, idx);
        take_max(v[u].z, at + 2, best, idx), take_max(v[u].w, at + 3, best, idx);
      }
    }
    for (; c < n4; c += threads) {
      const float4 v = r4[c];
      take_max(v.x, 4 * c, best, idx), take_max(v.y, 4 * c + 1, best, idx);
      take_max(v.z, 4 * c + 2, best, idx), take_max(v.w, 4 * c + 3, best, idx);
    }
    return;
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) take_max(row[i], i, best, idx);
}

}  // namespace skim::cuda
