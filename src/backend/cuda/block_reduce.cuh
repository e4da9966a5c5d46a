// A block-wide reduction for the row kernels (sampling, log-probabilities): every thread of
// the block calls it with its value and gets op over all of them. `scratch` holds one T per
// warp (blockDim.x / 32); the call synchronises the block, so scratch may be reused by the
// next call.
#pragma once

namespace skim::cuda {

template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) v = op(v, scratch[w]);
  return v;
}

}  // namespace skim::cuda
