#include "backend/cuda/gemm.h"

#include "backend/cuda/ops.cuh"

namespace skim::cuda {

Gemm::Gemm() {
  check(cublasCreate(&handle_), "cublasCreate");
  workspace_.resize(size_t(32) << 20);  // cuBLAS's recommendation for Hopper
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(handle_);
}

void Gemm::linear(const uint16_t* x, const uint16_t* w, int rows, int cols, float* y, int n, cudaStream_t stream) {
  if (n == 0) return;
  if (gemv(x, w, y, n, rows, cols, stream)) return;  // decode: a few rows
  if (!stream_set_ || stream != stream_) {
    // Setting the stream resets the workspace to cuBLAS's own pool, which allocates.
    check(cublasSetStream(handle_, stream), "cublasSetStream");
    check(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
    stream_ = stream;
    stream_set_ = true;
  }
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: W is [in][out] (lda = in), x is [in][n], y is [out][n]; y = W^T x.
  check(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha, w, CUDA_R_16BF, cols, x, CUDA_R_16BF,
                     cols, &beta, y, CUDA_R_32F, rows,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

}  // namespace skim::cuda
