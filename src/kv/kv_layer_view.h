// Read-only view of one layer of the CPU's paged KV cache (kv/paged_kv_cache.h), what the
// CPU attention kernels take; no dependencies, so the kernels build without the cache.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skim {

// Read-only view of one layer of the cache, what attention kernels take.
struct KVLayerView {
  const float* k = nullptr;  // [num_pages][num_kv_heads][page_size][head_dim]
  const float* v = nullptr;
  const float* kmin = nullptr;  // [num_pages][num_kv_heads][head_dim]
  const float* kmax = nullptr;
  int num_kv_heads = 0, head_dim = 0, page_size = 0;

  size_t offset(int32_t page, int kv_head) const {
    return (size_t(page) * num_kv_heads + kv_head) * page_size * head_dim;
  }
};

}  // namespace skim
