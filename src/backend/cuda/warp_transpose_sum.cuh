// Sums of 16 per-lane partials over a warp, one exchange per halving: each lane holds partial
// sums s[0..16) of 16 items (pages, tokens) over its own dims; at each step lanes 2 Half apart
// pair up, the lower keeps items [0, Half) of its run and the upper [Half, 2 Half), each sending
// the other half to its partner. After 8 + 4 + 2 + 1 shuffles and one more across lane pairs,
// lanes 2j and 2j + 1 hold item j's whole sum: 16 shuffles for 16 items, where a butterfly per
// item takes 80. Used by the page selection scores and the token decode gather.
#pragma once

namespace skim::cuda {

template <int Half, int N>
__device__ __forceinline__ void exchange_halves(float (&s)[N], int lane) {
  const bool upper = lane & (2 * Half);
#pragma unroll
  for (int k = 0; k < Half; ++k) {
    const float send = upper ? s[k] : s[k + Half];
    s[k] = (upper ? s[k + Half] : s[k]) + __shfl_xor_sync(0xffffffffu, send, 2 * Half);
  }
}

// Item lane / 2's sum over the warp's 32 lanes (s is consumed).
__device__ __forceinline__ float transpose_sum16(float (&s)[16], int lane) {
  exchange_halves<8>(s, lane);
  exchange_halves<4>(s, lane);
  exchange_halves<2>(s, lane);
  exchange_halves<1>(s, lane);
  return s[0] + __shfl_xor_sync(0xffffffffu, s[0], 1);
}

// The same for 8 items: after 4 + 2 + 1 exchanges lanes 2j, 2j + 1, 2j + 16 and 2j + 17 hold
// partials of item j, which two more shuffles sum: item lane / 2's sum at lanes 0..15 (s is
// consumed).
__device__ __forceinline__ float transpose_sum8(float (&s)[8], int lane) {
  exchange_halves<4>(s, lane);
  exchange_halves<2>(s, lane);
  exchange_halves<1>(s, lane);
  const float x = s[0] + __shfl_xor_sync(0xffffffffu, s[0], 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 16);
}

// Either, by the count of items.
__device__ __forceinline__ float transpose_sum(float (&s)[16], int lane) { return transpose_sum16(s, lane); }
__device__ __forceinline__ float transpose_sum(float (&s)[8], int lane) { return transpose_sum8(s, lane); }

}  // namespace skim::cuda
