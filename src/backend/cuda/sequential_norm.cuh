// The norm CSAttention's CPU kernels normalise a slice by (backend/cpu/kmeans.h normalize): a
// double sum of squares in element order, then the float square root. The device kernels that
// must see the CPU's slices (cs_select, cs_insert, cs_build) compute it the same way, on one
// thread, so a normalised slice and a norm-weighted sum are bit for bit the CPU's.
#pragma once

namespace skim::cuda {

// x(i) for i < n: the slice's elements as floats.
template <class Element>
__device__ __forceinline__ float sequential_norm(Element x, int n) {
  double s2 = 0;
  for (int i = 0; i < n; ++i) s2 += double(x(i)) * x(i);
  return float(sqrt(s2));
}

}  // namespace skim::cuda
