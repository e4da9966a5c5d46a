// Device memory for the GPU backend: an owning buffer, and status checks that turn CUDA and
// cuBLAS failures into skim::Error messages naming the call. Host C++ only (fmt).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/error.h"

namespace skim::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA: {} failed: {}", what, cudaGetErrorString(e));
}

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS: {} failed: {}", what, cublasGetStatusString(s));
}

// Fails with a message naming `what` (a flag or command) when no CUDA device can be used.
inline void require_device(const char* what) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    fail("{}: no CUDA device is available ({})", what, e != cudaSuccess ? cudaGetErrorString(e) : "none found");
}

// The device's total memory, bytes (what the KV cache is checked against before allocation).
inline int64_t device_memory_bytes() {
  size_t free_bytes = 0, total = 0;
  check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  return int64_t(total);
}

// Elements of T on the device, freed with the buffer. Allocation happens at construction or
// resize only (engine set-up), never inside a decode step.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }

  void resize(size_t count) {
    if (count == count_) return;
    reset();
    if (count == 0) return;
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, count * sizeof(T));
    if (e != cudaSuccess)
      fail("CUDA: cannot allocate {:.1f} MiB on the GPU: {}", double(count * sizeof(T)) / (1 << 20),
           cudaGetErrorString(e));
    ptr_ = static_cast<T*>(p);
    count_ = count;
  }
  void reset() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Elements of T in pinned host memory mapped into the device's address space (cudaHostAlloc
// mapped): kernels read and write it over PCIe through data(). KV beyond GPU memory keeps its
// pools here. Allocated at construction only.
template <typename T>
class MappedHostBuffer {
 public:
  MappedHostBuffer() = default;
  explicit MappedHostBuffer(size_t count) {
    if (count == 0) return;
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, count * sizeof(T), cudaHostAllocMapped);
    if (e != cudaSuccess)
      fail("CUDA: cannot allocate {:.1f} GiB of pinned host memory: {}", double(count * sizeof(T)) / (1 << 30),
           cudaGetErrorString(e));
    host_ = static_cast<T*>(p);
    void* d = nullptr;
    e = cudaHostGetDevicePointer(&d, p, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(p);
      fail("CUDA: pinned host memory not mapped to the device: {}", cudaGetErrorString(e));
    }
    device_ = static_cast<T*>(d);
    count_ = count;
  }
  ~MappedHostBuffer() {
    if (host_) cudaFreeHost(host_);
  }
  MappedHostBuffer(const MappedHostBuffer&) = delete;
  MappedHostBuffer& operator=(const MappedHostBuffer&) = delete;
  MappedHostBuffer(MappedHostBuffer&& o) noexcept { *this = std::move(o); }
  MappedHostBuffer& operator=(MappedHostBuffer&& o) noexcept {
    std::swap(host_, o.host_);
    std::swap(device_, o.device_);
    std::swap(count_, o.count_);
    return *this;
  }

  T* data() { return device_; }  // the device's address of it
  T* host() { return host_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T *host_ = nullptr, *device_ = nullptr;
  size_t count_ = 0;
};

template <typename T>
void upload(DeviceBuffer<T>& dst, const T* src, size_t count) {
  dst.resize(count);
  check(cudaMemcpy(dst.data(), src, count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

// GPU milliseconds of what `enqueue` puts on `stream` (CUDA events around it; waits for it).
template <typename F>
double gpu_time_ms(cudaStream_t stream, F&& enqueue) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  check(cudaEventRecord(a, stream), "cudaEventRecord");
  enqueue();
  check(cudaEventRecord(b, stream), "cudaEventRecord");
  check(cudaEventSynchronize(b), "timed GPU work");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

}  // namespace skim::cuda
