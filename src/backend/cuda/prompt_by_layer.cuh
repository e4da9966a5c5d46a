// The two small kernels of a prompt run layer by layer (GpuForward::run_by_layer, KV beyond GPU
// memory): a chunk's residual stream saved between layers, and a layer's pages copied between
// the host pools and the device's one-layer pools. This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace skim::cuda {

// out[i] = x[i] + y[i], i < count (fp32): the residual stream with the last sublayer's output
// added, as the next layer's add_rmsnorm would add it (the same fp32 add).
cudaError_t fold_residual(const float* x, const float* y, float* out, size_t count, cudaStream_t stream);

// For each of `count` page ids: the page's page_elems bf16 elements from `from` to `to` (two
// pools of one layout, [pages][page_elems]; either may be mapped host memory).
cudaError_t copy_pool_pages(const uint16_t* from, uint16_t* to, const int32_t* pages, int count, size_t page_elems,
                            cudaStream_t stream);

}  // namespace skim::cuda
