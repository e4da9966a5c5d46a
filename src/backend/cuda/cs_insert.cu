// CSAttention's streaming insert on the GPU (see cs_insert.cuh).
#include "backend/cuda/cs_insert.cuh"

#include <cuda_fp16.h>

#include "attention/top_list_heap.h"
#include "backend/cuda/sequential_norm.cuh"

namespace skim::cuda {

namespace {

constexpr int kMaxSlice = 128, kMaxLists = 1024;

// One CTA per insert; thread l < M x C offers the key to list l = m * C + c.
__global__ void __launch_bounds__(kMaxLists) insert_kernel(const CsInsertArgs* args) {
  const CsInsertArgs a = args[blockIdx.x];
  const int M = a.subspaces, C = a.centroids, ds = a.head_dim / M, l = threadIdx.x;
  if (l >= M * C) return;
  const int m = l / C;
  const float* k = a.key + size_t(m) * ds;
  // score=cos: the slice normalised as the CPU's normalize does (a zero slice stays zero).
  float norm = a.score_dot ? 1.0f : sequential_norm([&](int i) { return k[i]; }, ds);
  if (norm == 0.0f) norm = 1.0f;
  const float* centroid = a.centroids_data + size_t(l) * ds;
  float score = 0.0f;
#pragma unroll 8  // loads in flight together (a row is 4 x 32 bytes apart from its neighbours')
  for (int i = 0; i < ds; ++i) score += centroid[i] * (a.score_dot ? k[i] : k[i] / norm);
  const uint16_t h = __half_as_ushort(__float2half_rn(score));
  if (a.admit && top_list::order_key(h) <= a.admit[l]) return;  // most keys: refused here
  const top_list::Heap heap{a.list_index + size_t(l) * a.stride(), a.list_score + size_t(l) * a.stride(),
                            a.list_size + l, a.list_capacity};
  heap.offer(a.position, h);
  if (a.admit) a.admit[l] = heap.admit_key();
}

}  // namespace

cudaError_t cs_insert(const CsInsertArgs* args, int count, const CsInsertArgs& s, cudaStream_t stream) {
  if (count < 0 || s.subspaces <= 0 || s.head_dim % s.subspaces != 0 || s.head_dim / s.subspaces > kMaxSlice ||
      s.centroids <= 0 || s.subspaces * s.centroids > kMaxLists || s.list_capacity < 0 ||
      (s.list_stride != 0 && s.list_stride < s.list_capacity) || (count > 0 && !args))
    return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const int lists = s.subspaces * s.centroids;
  insert_kernel<<<count, (lists + 31) / 32 * 32, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace skim::cuda
