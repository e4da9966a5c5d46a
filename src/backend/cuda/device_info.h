// What the launchers ask of the current device (SM count, compute capability, a kernel's
// occupancy), computed once per device and kept (PerDevice). Host code.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>

namespace skim::cuda::detail {

// A value computed once per device and kept: a launcher's attributes set on its kernels, the
// CTAs an SM holds. get() runs compute(dev, value) on a device's first call (again after a
// call that failed) and hands back the kept value after. Tensor parallelism launches from one
// thread a device: the first calls compute under a lock; a kept value is read without it (every
// launch asks device_info), its flag released after the value is written. Devices past
// kMaxDevices compute on every call.
template <class T>
class PerDevice {
 public:
  // The current device's value.
  template <class Compute>
  cudaError_t get(T& out, Compute&& compute) {
    int dev = 0;
    const cudaError_t e = cudaGetDevice(&dev);
    return e != cudaSuccess ? e : get(dev, out, compute);
  }
  // Device dev's value.
  template <class Compute>
  cudaError_t get(int dev, T& out, Compute&& compute) {
    const bool kept = dev >= 0 && dev < kMaxDevices;
    if (kept && known_[dev].load(std::memory_order_acquire)) {
      out = value_[dev];
      return cudaSuccess;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (kept && known_[dev].load(std::memory_order_relaxed)) {  // another thread computed it
      out = value_[dev];
      return cudaSuccess;
    }
    T v{};
    if (const cudaError_t e = compute(dev, v); e != cudaSuccess) return e;
    if (kept) {
      value_[dev] = v;
      known_[dev].store(true, std::memory_order_release);
    }
    out = v;
    return cudaSuccess;
  }

  // compute(dev) run once for the current device, for its effect (PerDevice<Done>: a kernel
  // attribute set once per device); again after a failure, as get.
  template <class Compute>
  cudaError_t once(Compute&& compute) {
    T unused;
    return get(unused, [&](int dev, T&) { return compute(dev); });
  }
  template <class Compute>
  cudaError_t once(int dev, Compute&& compute) {
    T unused;
    return get(dev, unused, [&](int d, T&) { return compute(d); });
  }

 private:
  static constexpr int kMaxDevices = 64;
  std::mutex mu_;
  T value_[kMaxDevices] = {};
  std::atomic<bool> known_[kMaxDevices] = {};
};

// Attributes set on a kernel once per device: PerDevice of nothing.
struct Done {};

struct DeviceInfo {
  int sms = 0;
  int cc_major = 0;
};

inline cudaError_t device_info(DeviceInfo& info) {
  static PerDevice<DeviceInfo> cache;
  return cache.get(info, [](int dev, DeviceInfo& d) {
    cudaError_t e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    return e;
  });
}

}  // namespace skim::cuda::detail
