// Host vectors to and from device buffers, for the CUDA tests.
#pragma once

#include <vector>

#include "backend/cuda/device_memory.h"

namespace skim::test {

template <typename T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer<T> d;
  cuda::upload(d, v.data(), v.size());
  return d;
}

template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& d) {
  std::vector<T> v(d.size());
  cuda::check(cudaMemcpy(v.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return v;
}

}  // namespace skim::test
