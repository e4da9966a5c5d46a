// The projections: y[n][out] = x[n][in] . W[out][in]^T, bf16 inputs, fp32 accumulation and
// output: up to kGemvMaxRows rows (decode) by skim's GEMV kernel (gemv.cu), more (prefill)
// on the tensor cores through cuBLAS. The handle has its own workspace, so calls
// allocate nothing and capture into CUDA graphs.
#pragma once

#include <cublas_v2.h>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/gpu_weights.h"

namespace skim::cuda {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void linear(const uint16_t* x, const GpuMatrix& w, float* y, int n, cudaStream_t stream) {
    linear(x, w.data.data(), w.rows, w.cols, y, n, stream);
  }
  // W's first `rows` rows of `cols` inputs (a part of a fused projection: its query rows).
  void linear(const uint16_t* x, const uint16_t* w, int rows, int cols, float* y, int n, cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  cudaStream_t stream_ = nullptr;
  bool stream_set_ = false;
};

}  // namespace skim::cuda
