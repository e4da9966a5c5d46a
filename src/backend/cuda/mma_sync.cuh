// The warp-level tensor-core MMA the kernels share (sm_80+): bf16 inputs, fp32 accumulation.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace skim::cuda::detail {

// c += A B, a whole m16n8k16 bf16 MMA (fp32 accumulate): a[4] this lane's A fragment (rows
// lane/4 and lane/4 + 8, k pairs 2*(lane%4) and + 8), b[2] its B fragment, c[4] rows lane/4
// (c[0..1]) and lane/4 + 8 (c[2..3]) at columns 2*(lane%4) and + 1.
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair in one register (an MMA fragment's k pair, or two outputs of an
// 8-byte store), each rounded to nearest even; lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace skim::cuda::detail
