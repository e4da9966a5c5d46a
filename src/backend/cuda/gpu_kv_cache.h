// The paged KV cache on the GPU: the CPU cache's layout (kv/paged_kv_cache.h) with bf16
// elements, the same page tables and page pool, and bf16 key digests (element-wise min/max
// per page and KV head: exact, the keys being bf16) kept by the forward pass's page_digest
// kernel; the CPU cache keeps fp32 ones. With `host_pools` the K and V pools live in pinned
// host memory mapped into the device's address space (KV beyond GPU memory: kernels read and
// write them over PCIe; a decode step reads its selected pages through a device cache,
// host_kv_slots.h), the digests stay on the device.
#pragma once

#include <cstdint>

#include "backend/cuda/device_memory.h"
#include "kv/page_pool.h"
#include "kv/paged_kv_cache.h"

namespace skim::cuda {

class GpuKVCache {
 public:
  explicit GpuKVCache(const KVCacheShape& shape, bool host_pools = false);

  const KVCacheShape& shape() const { return shape_; }
  PagePool& pool() { return pool_; }

  // One layer's pools: [num_pages][num_kv_heads][page_size][head_dim] bf16 (device addresses,
  // of host memory with host_pools).
  uint16_t* k(int layer) { return k_base_ + layer * layer_elems(); }
  uint16_t* v(int layer) { return v_base_ + layer * layer_elems(); }
  // One layer's digests: [num_pages][num_kv_heads][head_dim] bf16.
  uint16_t* kmin(int layer) { return kmin_.data() + layer * digest_elems(); }
  uint16_t* kmax(int layer) { return kmax_.data() + layer * digest_elems(); }

  size_t bytes_per_token() const;  // K+V of all layers, bf16
  size_t bytes() const { return k_.bytes() + v_.bytes() + kmin_.bytes() + kmax_.bytes(); }  // on the device

  // Fills every page's K, V and digests with pseudo-random values (benchmarks that need a
  // long context without prefilling it; the digests do not bound the keys).
  void fill_random(uint64_t seed, cudaStream_t stream);

 private:
  size_t layer_elems() const;
  size_t digest_elems() const;

  KVCacheShape shape_;
  PagePool pool_;
  DeviceBuffer<uint16_t> k_, v_;               // the pools on the device, or
  MappedHostBuffer<uint16_t> host_k_, host_v_;  // in host memory
  uint16_t *k_base_ = nullptr, *v_base_ = nullptr;
  DeviceBuffer<uint16_t> kmin_, kmax_;
};

}  // namespace skim::cuda
