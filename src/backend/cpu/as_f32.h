// The CPU kernels read either element type of their argument structs (fp32: the CPU cache;
// bf16 bits: the GPU cache, as the CUDA kernels' oracle); they compute in fp32.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/dtype.h"

namespace skim::cpu {

// n elements as fp32: the elements themselves when they are fp32, else widened into `buf`.
template <class Elem>
const float* as_f32(const Elem* p, int n, std::vector<float>& buf) {
  if constexpr (std::is_same_v<Elem, float>) {
    return p;
  } else {
    buf.resize(size_t(n));
    for (int i = 0; i < n; ++i) buf[size_t(i)] = bf16_to_f32(p[i]);
    return buf.data();
  }
}

}  // namespace skim::cpu
