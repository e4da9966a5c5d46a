// A prompt layer by layer's kernels (see prompt_by_layer.cuh).
#include "backend/cuda/prompt_by_layer.cuh"

#include <algorithm>

namespace skim::cuda {

namespace {

__global__ void fold_kernel(const float* x, const float* y, float* out, size_t count) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = x[i] + y[i];
}

// CTA per page: 16-byte pieces while they fit, then single elements.
__global__ void copy_pages_kernel(const uint16_t* from, uint16_t* to, const int32_t* pages, size_t page_elems) {
  const size_t base = size_t(pages[blockIdx.x]) * page_elems;
  const uint16_t* src = from + base;
  uint16_t* dst = to + base;
  const bool aligned = page_elems % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  if (aligned) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (size_t i = threadIdx.x; i < page_elems / 8; i += blockDim.x) d[i] = s[i];
  } else {
    for (size_t i = threadIdx.x; i < page_elems; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace

cudaError_t fold_residual(const float* x, const float* y, float* out, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const size_t blocks = std::min<size_t>((count + 255) / 256, 4096);
  fold_kernel<<<unsigned(blocks), 256, 0, stream>>>(x, y, out, count);
  return cudaGetLastError();
}

cudaError_t copy_pool_pages(const uint16_t* from, uint16_t* to, const int32_t* pages, int count, size_t page_elems,
                            cudaStream_t stream) {
  if (count < 0) return cudaErrorInvalidValue;
  if (count == 0 || page_elems == 0) return cudaSuccess;
  copy_pages_kernel<<<count, 256, 0, stream>>>(from, to, pages, page_elems);
  return cudaGetLastError();
}

}  // namespace skim::cuda
