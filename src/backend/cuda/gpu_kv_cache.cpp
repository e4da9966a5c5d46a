#include "backend/cuda/gpu_kv_cache.h"

#include <cstring>

#include "backend/cuda/ops.cuh"

namespace skim::cuda {

GpuKVCache::GpuKVCache(const KVCacheShape& s, bool host_pools) : shape_(s), pool_(s.num_pages, s.page_size) {
  SKIM_REQUIRE(s.num_layers > 0 && s.num_kv_heads > 0 && s.head_dim > 0,
               "KV cache: invalid shape (layers {}, kv heads {}, head_dim {})", s.num_layers,
               s.num_kv_heads, s.head_dim);
  const size_t elems = layer_elems() * s.num_layers;
  if (host_pools) {
    host_k_ = MappedHostBuffer<uint16_t>(elems);
    host_v_ = MappedHostBuffer<uint16_t>(elems);
    k_base_ = host_k_.data();
    v_base_ = host_v_.data();
  } else {
    k_.resize(elems);
    v_.resize(elems);
    k_base_ = k_.data();
    v_base_ = v_.data();
  }
  kmin_.resize(digest_elems() * s.num_layers);
  kmax_.resize(digest_elems() * s.num_layers);
  // Unwritten slots are never read (attention stops at each sequence's length); zero them
  // anyway so a bug reads zeros, not stale data.
  if (host_pools) {
    std::memset(host_k_.host(), 0, host_k_.bytes());
    std::memset(host_v_.host(), 0, host_v_.bytes());
  } else {
    check(cudaMemset(k_base_, 0, elems * sizeof(uint16_t)), "cudaMemset");
    check(cudaMemset(v_base_, 0, elems * sizeof(uint16_t)), "cudaMemset");
  }
}

size_t GpuKVCache::layer_elems() const {
  return size_t(shape_.num_pages) * shape_.num_kv_heads * shape_.page_size * shape_.head_dim;
}

size_t GpuKVCache::digest_elems() const {
  return size_t(shape_.num_pages) * shape_.num_kv_heads * shape_.head_dim;
}

size_t GpuKVCache::bytes_per_token() const {
  return size_t(2) * shape_.num_layers * shape_.num_kv_heads * shape_.head_dim * sizeof(uint16_t);
}

void GpuKVCache::fill_random(uint64_t seed, cudaStream_t stream) {
  const size_t elems = layer_elems() * shape_.num_layers;
  fill_random_bf16(k_base_, elems, seed, 1.0f, stream);
  fill_random_bf16(v_base_, elems, seed + 1, 1.0f, stream);
  fill_random_bf16(kmin_.data(), kmin_.size(), seed + 2, 1.0f, stream);
  fill_random_bf16(kmax_.data(), kmax_.size(), seed + 3, 1.0f, stream);
}

}  // namespace skim::cuda
