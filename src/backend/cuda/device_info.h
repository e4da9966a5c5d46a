// What the launchers ask of the current device (SM count, compute capability), read once per
// device and cached. Host code.
#pragma once

#include <cuda_runtime_api.h>

namespace skim::cuda::detail {

struct DeviceInfo {
  int sms = 0;
  int cc_major = 0;
};

inline cudaError_t device_info(DeviceInfo& info) {
  constexpr int kMaxDevices = 64;
  static DeviceInfo cache[kMaxDevices];  // benign race: every writer stores the same values
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < kMaxDevices && cache[dev].sms > 0) {
    info = cache[dev];
    return cudaSuccess;
  }
  DeviceInfo d;
  if ((e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
    return e;
  if ((e = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev)) !=
      cudaSuccess)
    return e;
  if (dev < kMaxDevices) cache[dev] = d;
  info = d;
  return cudaSuccess;
}

}  // namespace skim::cuda::detail
