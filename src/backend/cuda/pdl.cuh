// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl may start while the
// stream's previous kernel still runs, once every CTA of that kernel has called
// pdl_launch_dependents (or exited); it must call pdl_wait before reading anything its
// predecessors write, and gets their writes after it. In a decode step's CUDA graph of ~12
// kernels per layer this hides each launch's latency and ramp behind the previous kernel's tail.
// Below sm_90 both calls compile to nothing and launch_pdl launches plainly.
//
// Rule: launch with launch_pdl only kernels whose first statements are pdl_wait() (then
// pdl_launch_dependents()): a kernel that reads its inputs before waiting would race. Since every
// kernel waits before it lets its successor launch, a kernel starts only after its predecessor's
// predecessor has finished: what that one and earlier kernels (or earlier steps) wrote may be
// read before the wait, and nothing its predecessor writes (the split decode's merge prefetches
// RetroAttention's cache entries so: paged_decode_attention_impl.cuh, WriteMergedState).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/device_info.h"

namespace skim::cuda {

namespace detail {

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The two calls, first thing in a kernel launched by launch_pdl: wait for the predecessors, then
// let the successor launch (it waits for this kernel in turn).
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

// Whether the current device runs programmatic dependent launches (compute capability 9+).
inline bool pdl_supported() {
  DeviceInfo info;
  return device_info(info) == cudaSuccess && info.cc_major >= 9;
}

}  // namespace detail

// kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent of the stream's
// previous kernel (see the rule above).
template <class... Params, class... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = detail::pdl_supported() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}

}  // namespace skim::cuda
