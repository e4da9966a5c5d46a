// CSAttention's table build on the GPU (see cs_build.cuh).
#include "backend/cuda/cs_build.cuh"

#include <cuda_fp16.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <cstdint>

#include "attention/top_list_heap.h"
#include "backend/cuda/hash_random.cuh"
#include "backend/cuda/page_select_common.cuh"
#include "backend/cuda/sequential_norm.cuh"
#include "backend/cuda/workspace_carver.h"

namespace skim::cuda {

namespace {

using page_select::kThreads;  // 512: a k-means CTA and a list CTA (the radix select's width)
using page_select::order_key;

constexpr int kMaxSlice = 128, kMaxCentroids = 256, kMaxPoints = 65536, kMaxCandidates = 8;
constexpr size_t kMaxClusterSmem = 200 * 1024;  // the Lloyd sums of a k-means CTA
constexpr int kScoreKeys = 128;  // keys a score CTA scores against every centroid (a thread each)

// The workspace, per build b: its points [ds][max_points] (Points), their D^2 and its prefix sums
// [max_points], the sort keys of one centroid's key scores [C][max_keys] and each score CTA's
// sum of them [C][score chunks], the lists' heap keys before and after their sort [C][L]; the
// segments [count][C]; CUB's scratch.
struct Layout {
  float* points = nullptr;
  float* d2 = nullptr;
  double* prefix = nullptr;
  uint32_t* keys = nullptr;
  double* chunk_sums = nullptr;
  uint64_t *entries = nullptr, *sorted = nullptr;
  int *begin = nullptr, *end = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0, bytes = 0;
  int ds = 0, max_points = 0, max_keys = 0, chunks = 0;
};

Layout layout(const CsBuildArgsBf16& a, int count, int max_keys, char* base) {
  Layout w;
  w.ds = a.head_dim / a.subspaces;
  w.max_points = a.max_points;
  w.max_keys = max_keys;
  const size_t B = size_t(count), P = size_t(a.max_points), C = size_t(a.centroids), L = size_t(a.list_capacity);
  WorkspaceCarver carve(base);
  w.points = carve.take<float>(B * P * w.ds);
  w.d2 = carve.take<float>(B * P);
  w.prefix = carve.take<double>(B * P);
  w.keys = carve.take<uint32_t>(B * C * size_t(max_keys));
  w.chunks = (max_keys + kScoreKeys - 1) / kScoreKeys;
  w.chunk_sums = carve.take<double>(B * C * size_t(w.chunks));
  w.entries = carve.take<uint64_t>(B * C * L);
  w.sorted = carve.take<uint64_t>(B * C * L);
  w.begin = carve.take<int>(B * C);
  w.end = carve.take<int>(B * C);
  cub::DeviceSegmentedRadixSort::SortKeys(nullptr, w.scratch_bytes, static_cast<const uint64_t*>(nullptr),
                                          static_cast<uint64_t*>(nullptr), int(B * C * L), int(B * C),
                                          static_cast<const int*>(nullptr), static_cast<const int*>(nullptr));
  w.scratch = carve.take<char>(w.scratch_bytes);
  w.bytes = carve.bytes();
  return w;
}

// The sample of a build: every stride-th of its n vectors.
__device__ __forceinline__ int sample_stride(const CsBuildArgsBf16& a) {
  return (a.num_vectors + a.max_points - 1) / a.max_points;
}
__device__ __forceinline__ int sample_size(const CsBuildArgsBf16& a) {
  const int stride = sample_stride(a);
  return (a.num_vectors + stride - 1) / stride;
}

// A build's sampled slices, dimension-major (element t of point i at t * stride + i): the
// threads of a warp, each on its own point, read consecutive floats. (Point-major, every load
// of the k-means touched 32 cache lines: 77 ms a layer at 4096 points.)
struct Points {
  float* base;
  int stride;
  __device__ __forceinline__ float& operator()(int i, int t) const { return base[size_t(t) * stride + i]; }
};

__device__ __forceinline__ float bf16_value(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

// Point i against x, or against point j: the products added in element order (the CPU's dot).
__device__ __forceinline__ float dot(Points p, int i, const float* x, int n) {
  float s = 0.0f;
  for (int t = 0; t < n; ++t) s += p(i, t) * x[t];
  return s;
}
__device__ __forceinline__ float dot(Points p, int i, int j, int n) {
  float s = 0.0f;
  for (int t = 0; t < n; ++t) s += p(i, t) * p(j, t);
  return s;
}

// Squared cosine distance (1 - cos)^2 from a similarity, as the CPU's distance2.
__device__ __forceinline__ float distance2(float sim) {
  const float d = fmaxf(0.0f, 1.0f - sim);
  return d * d;
}

__device__ __forceinline__ Points points_of(const Layout& w, int build) {
  return {w.points + size_t(build) * w.max_points * w.ds, w.max_points};
}

// Step 1, a CTA per build: the normalised slices of the sampled vectors.
__global__ void __launch_bounds__(256) sample_kernel(const CsBuildArgsBf16* builds, const Layout w) {
  const CsBuildArgsBf16 a = builds[blockIdx.x];
  const int ds = w.ds, stride = sample_stride(a), n = sample_size(a);
  const Points p = points_of(w, blockIdx.x);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float* v = a.vectors + size_t(i) * stride * a.head_dim + size_t(a.subspace) * ds;
    for (int t = 0; t < ds; ++t) p(i, t) = v[t];
    const float norm = sequential_norm([&](int t) { return p(i, t); }, ds);  // the CPU's normalize
    if (norm > 0)
      for (int t = 0; t < ds; ++t) p(i, t) /= norm;
  }
}

using Reduce = cub::BlockReduce<double, kThreads>;
using Scan = cub::BlockScan<double, kThreads>;

struct KMeansSmem {
  union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  };
  double total, carry, after[kMaxCandidates];
  int picks[kMaxCandidates], chosen;
};

// D^2's inclusive prefix sums in double (the draws search them) and their total.
__device__ void prefix_sums(KMeansSmem& sm, const float* d2, double* prefix, int n) {
  if (threadIdx.x == 0) sm.carry = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + threadIdx.x;
    double incl, tile;
    Scan(sm.scan).InclusiveSum(i < n ? double(d2[i]) : 0.0, incl, tile);
    if (i < n) prefix[i] = sm.carry + incl;
    __syncthreads();  // every thread has read the carry and the scan storage
    if (threadIdx.x == 0) sm.carry += tile;
    __syncthreads();
  }
  if (threadIdx.x == 0) sm.total = sm.carry;
  __syncthreads();
}

// The block's sum of x.
__device__ double block_sum(KMeansSmem& sm, double x) {
  const double total = Reduce(sm.reduce).Sum(x);
  __syncthreads();
  return total;  // thread 0's
}

// Each cluster's double sum of its points (sum[c][ds]) and size, the points added in index
// order (as the CPU adds them; deterministic, where shared-memory double atomics were neither
// ordered nor fast: 84 ms a layer at 4096 points). A warp per cluster: its lanes read 32
// assignments at a time, and for each member in order add the member's row, a dim a lane.
__device__ void cluster_sums(const int* assigned, Points points, int n, int k, int ds, double* sum,
                             int* members) {
  const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
  for (int cj = threadIdx.x / 32; cj < k; cj += warps) {
    double acc[kMaxSlice / 32] = {};
    int count = 0;
    for (int i0 = 0; i0 < n; i0 += 32) {
      const bool mine = i0 + lane < n && assigned[i0 + lane] == cj;
      for (uint32_t bits = __ballot_sync(0xffffffffu, mine); bits != 0; bits &= bits - 1) {
        const int i = i0 + __ffs(bits) - 1;
#pragma unroll
        for (int r = 0; r < kMaxSlice / 32; ++r)
          if (const int t = lane + 32 * r; t < ds) acc[r] += double(points(i, t));
        ++count;
      }
    }
#pragma unroll
    for (int r = 0; r < kMaxSlice / 32; ++r)
      if (const int t = lane + 32 * r; t < ds) sum[size_t(cj) * ds + t] = acc[r];
    if (lane == 0) members[cj] = count;
  }
}

// Step 2, a CTA per build: greedy k-means++ seeds, then Lloyd iterations, into centroids_out.
// Dynamic shared memory: the clusters' double sums [C][ds] and sizes [C].
__global__ void __launch_bounds__(kThreads) kmeans_kernel(const CsBuildArgsBf16* builds, const Layout w) {
  extern __shared__ double cluster_sum[];
  __shared__ KMeansSmem sm;
  const CsBuildArgsBf16 a = builds[blockIdx.x];
  const int ds = w.ds, n = sample_size(a), k = a.centroids, m = a.subspace;
  const int candidates = min(kMaxCandidates, 2 + int(log(double(k))));
  const uint64_t seed = 0x5eed0000ull + uint64_t(m);
  const Points points = points_of(w, blockIdx.x);
  float* d2 = w.d2 + size_t(blockIdx.x) * w.max_points;
  double* prefix = w.prefix + size_t(blockIdx.x) * w.max_points;
  float* c = a.centroids_out + size_t(m) * k * ds;
  uint64_t draws = 0;  // uniform over the CTA: every thread counts the same draws

  // The first seed uniformly; D^2 to it.
  const int first = int(draw_bits(seed, draws++) % uint64_t(n));
  for (int t = threadIdx.x; t < ds; t += blockDim.x) c[t] = points(first, t);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) d2[i] = distance2(dot(points, i, c, ds));
  __syncthreads();
  for (int j = 1; j < k; ++j) {
    prefix_sums(sm, d2, prefix, n);
    if (threadIdx.x < candidates) {  // candidate t: a D^2 draw (uniform when every D is 0)
      const uint64_t d = draws + uint64_t(threadIdx.x);
      int pick;
      if (sm.total <= 0) {
        pick = int(draw_bits(seed, d) % uint64_t(n));
      } else {
        const double r = draw_unit(seed, d) * sm.total;
        int lo = 0, hi = n - 1;  // the first i with prefix[i] > r
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (prefix[mid] > r) hi = mid;
          else lo = mid + 1;
        }
        pick = lo;
      }
      sm.picks[threadIdx.x] = pick;
    }
    draws += uint64_t(candidates);
    __syncthreads();
    // Each candidate's total D^2 once it is a seed.
    double after[kMaxCandidates] = {};
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
#pragma unroll
      for (int t = 0; t < kMaxCandidates; ++t)
        if (t < candidates) after[t] += fminf(d2[i], distance2(dot(points, i, sm.picks[t], ds)));
    }
#pragma unroll
    for (int t = 0; t < kMaxCandidates; ++t)
      if (t < candidates) {
        const double total = block_sum(sm, after[t]);
        if (threadIdx.x == 0) sm.after[t] = total;
      }
    if (threadIdx.x == 0) {
      int best = 0;
      for (int t = 1; t < candidates; ++t)
        if (sm.after[t] < sm.after[best]) best = t;
      sm.chosen = sm.picks[best];
    }
    __syncthreads();
    float* cj = c + size_t(j) * ds;
    for (int t = threadIdx.x; t < ds; t += blockDim.x) cj[t] = points(sm.chosen, t);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
      d2[i] = fminf(d2[i], distance2(dot(points, i, cj, ds)));
    __syncthreads();
  }

  // Lloyd: each point to its nearest centroid (the first of equal ones), each centroid the
  // normalised double mean of its points (an empty cluster keeps its centroid).
  int* members = reinterpret_cast<int*>(cluster_sum + size_t(k) * ds);
  int* assigned = reinterpret_cast<int*>(d2);  // D^2 is spent once the seeds are chosen
  for (int it = 0; it < a.iters; ++it) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      int best = 0;
      float best_sim = -INFINITY;
      for (int cj = 0; cj < k; ++cj) {
        const float sim = dot(points, i, c + size_t(cj) * ds, ds);
        if (sim > best_sim) best_sim = sim, best = cj;
      }
      assigned[i] = best;
    }
    __syncthreads();
    cluster_sums(assigned, points, n, k, ds, cluster_sum, members);
    __syncthreads();
    for (int cj = threadIdx.x; cj < k; cj += blockDim.x) {
      const double* s = cluster_sum + size_t(cj) * ds;
      double norm = 0;
      for (int t = 0; t < ds; ++t) norm += s[t] * s[t];
      if (members[cj] == 0 || norm <= 0) continue;
      norm = sqrt(norm);
      for (int t = 0; t < ds; ++t) c[size_t(cj) * ds + t] = float(s[t] / norm);
    }
    __syncthreads();
  }
}

// A list entry's sort key: ascending order is TopList's rank order (fp16 score ascending, then
// position descending), so a list sorted by it is a valid min-heap; it carries the fp16 bits
// and the position.
__device__ __forceinline__ uint64_t heap_key(uint16_t h, int32_t position) {
  const uint32_t rank = uint32_t(top_list::order_key(h) + 32768) << 16 | h;
  return uint64_t(rank) << 32 | uint32_t(0x7fffffff - position);
}

__device__ __forceinline__ float key_score(uint32_t key) {  // order_key's inverse
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Step 3, CTA (chunk of kScoreKeys keys, build b), a thread per key: the keys' slices staged in
// shared memory (coalesced: consecutive threads read consecutive elements), each scored against
// every centroid of the subspace (the products added in element order, as the CPU does; the
// slice normalised first when !score_dot), the sort keys written per centroid, and the chunk's
// sum of each centroid's scores (warp sums, then the warps' in order: deterministic). Each key is
// read once, not once per centroid. Dynamic shared memory: score_smem.
__global__ void __launch_bounds__(kScoreKeys) score_kernel(const CsBuildArgsBf16* builds, const Layout w) {
  extern __shared__ double score_shared[];
  constexpr int kWarps = kScoreKeys / 32;
  const CsBuildArgsBf16 a = builds[blockIdx.y];
  const int ds = w.ds, C = a.centroids, m = a.subspace, num_keys = min(a.num_keys, w.max_keys);
  const int j0 = blockIdx.x * kScoreKeys, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (j0 >= num_keys) return;  // past this build's keys (the grid covers the call's largest)
  double* warp_sums = score_shared;                                           // [C][kWarps]
  float* centroids = reinterpret_cast<float*>(warp_sums + size_t(C) * kWarps);  // [C][ds]
  float* slices = centroids + size_t(C) * ds;  // [kScoreKeys][ds + 1] (padded: no bank conflicts)
  for (int t = threadIdx.x; t < C * ds; t += blockDim.x) centroids[t] = a.centroids_out[size_t(m) * C * ds + t];
  for (int x = threadIdx.x; x < kScoreKeys * ds; x += blockDim.x) {
    const int jl = x / ds, t = x % ds, j = j0 + jl;
    float v = 0.0f;
    if (j < num_keys) {
      const size_t row = (size_t(a.pages[j / a.page_size]) * a.num_kv_heads + a.kv_head) * a.page_size + j % a.page_size;
      v = bf16_value(a.k_pool[row * a.head_dim + size_t(m) * ds + t]);
    }
    slices[jl * (ds + 1) + t] = v;
  }
  __syncthreads();
  const int j = j0 + threadIdx.x;
  const float* k = slices + threadIdx.x * (ds + 1);
  const float norm = a.score_dot ? 0.0f : sequential_norm([&](int t) { return k[t]; }, ds);
  const size_t unit0 = size_t(blockIdx.y) * C;
  for (int c = 0; c < C; ++c) {
    const float* centroid = centroids + size_t(c) * ds;
    float score = 0.0f;
    for (int t = 0; t < ds; ++t) score += centroid[t] * (norm > 0 ? k[t] / norm : k[t]);
    if (j < num_keys) w.keys[(unit0 + c) * w.max_keys + j] = order_key(score);
    double sum = j < num_keys ? double(score) : 0.0;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) warp_sums[c * kWarps + warp] = sum;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    double sum = 0;
    for (int x = 0; x < kWarps; ++x) sum += warp_sums[c * kWarps + x];
    w.chunk_sums[(unit0 + c) * w.chunks + blockIdx.x] = sum;
  }
}

size_t score_smem(const CsBuildArgsBf16& a) {
  const size_t ds = size_t(a.head_dim / a.subspaces);
  return size_t(a.centroids) * (kScoreKeys / 32) * sizeof(double) +
         (size_t(a.centroids) * ds + kScoreKeys * (ds + 1)) * sizeof(float);
}

struct ListSmem {
  page_select::SelectSmem select;
  typename Reduce::TempStorage reduce;
};

// Step 4, CTA (centroid c, build b): the top min(L, num_keys) of the scored keys (ties to the
// smaller position) as heap keys; the list's size, tail and sort segment.
__global__ void __launch_bounds__(kThreads) list_kernel(const CsBuildArgsBf16* builds, const Layout w) {
  __shared__ ListSmem sm;
  const CsBuildArgsBf16 a = builds[blockIdx.y];
  const int c = blockIdx.x, m = a.subspace, num_keys = min(a.num_keys, w.max_keys);
  const size_t l = size_t(m) * a.centroids + c, unit = size_t(blockIdx.y) * a.centroids + c;
  const uint32_t* keys = w.keys + unit * w.max_keys;
  const int kept = min(a.list_capacity, num_keys);
  uint64_t* entries = w.entries + unit * a.list_capacity;
  double in = 0;
  auto keep = [&](int p, int rank) {
    const float score = key_score(keys[p]);
    in += score;
    entries[rank] = heap_key(__half_as_ushort(__float2half_rn(score)), p);
  };
  if (kept == num_keys) {
    for (int p = threadIdx.x; p < num_keys; p += blockDim.x) keep(p, p);
  } else if (kept > 0) {
    page_select::select_top_pages(sm.select, keys, num_keys, kept, keep, [](int) {});
  }
  in = Reduce(sm.reduce).Sum(in);
  if (threadIdx.x == 0) {
    double all = 0;  // the score chunks' sums, in order
    for (int x = 0; x < (num_keys + kScoreKeys - 1) / kScoreKeys; ++x) all += w.chunk_sums[unit * w.chunks + x];
    const int left = num_keys - kept;
    a.tail[l] = left > 0 ? float((all - in) / left) : 0.0f;
    a.list_size[l] = kept;
    w.begin[unit] = int(unit * a.list_capacity);
    w.end[unit] = int(unit * a.list_capacity + kept);
  }
}

// Step 6, CTA (centroid c, build b): the sorted heap keys into the list's storage.
__global__ void __launch_bounds__(256) unpack_kernel(const CsBuildArgsBf16* builds, const Layout w) {
  const CsBuildArgsBf16 a = builds[blockIdx.y];
  const size_t l = size_t(a.subspace) * a.centroids + blockIdx.x;
  const size_t unit = size_t(blockIdx.y) * a.centroids + blockIdx.x;
  const int kept = w.end[unit] - w.begin[unit];
  const uint64_t* sorted = w.sorted + unit * a.list_capacity;
  for (int i = threadIdx.x; i < kept; i += blockDim.x) {
    const uint64_t key = sorted[i];
    a.list_index[l * a.stride() + i] = int32_t(0x7fffffff - uint32_t(key));
    a.list_score[l * a.stride() + i] = uint16_t(key >> 32);
  }
}

size_t cluster_smem(const CsBuildArgsBf16& a) {
  return size_t(a.centroids) * (a.head_dim / a.subspaces) * sizeof(double) + size_t(a.centroids) * sizeof(int);
}

bool supported(const CsBuildArgsBf16& a, int count, int max_keys) {
  if (count < 0 || a.subspaces <= 0 || a.head_dim <= 0 || a.head_dim % a.subspaces != 0) return false;
  return a.head_dim / a.subspaces <= kMaxSlice && a.centroids > 0 && a.centroids <= kMaxCentroids &&
         a.max_points > 0 && a.max_points <= kMaxPoints && a.list_capacity > 0 &&
         (a.list_stride == 0 || a.list_stride >= a.list_capacity) && a.iters >= 0 && max_keys > 0 &&
         a.page_size > 0 && cluster_smem(a) <= kMaxClusterSmem && score_smem(a) <= kMaxClusterSmem;
}

}  // namespace

size_t cs_build_workspace_size(const CsBuildArgsBf16& a, int count, int max_keys) {
  return supported(a, count, max_keys) ? layout(a, count, max_keys, nullptr).bytes : 0;
}

cudaError_t cs_build(const CsBuildArgsBf16* builds, int count, const CsBuildArgsBf16& a, int max_keys,
                     const CsBuildWorkspace& ws, cudaStream_t stream) {
  if (!supported(a, count, max_keys) || (count > 0 && (!builds || !ws.data))) return cudaErrorInvalidValue;
  const Layout w = layout(a, count, max_keys, static_cast<char*>(ws.data));
  if (ws.bytes < w.bytes) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const size_t smem = cluster_smem(a), scoring = score_smem(a);
  cudaError_t e = cudaFuncSetAttribute(kmeans_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e == cudaSuccess) e = cudaFuncSetAttribute(score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scoring));
  if (e != cudaSuccess) return e;
  sample_kernel<<<count, 256, 0, stream>>>(builds, w);
  kmeans_kernel<<<count, kThreads, smem, stream>>>(builds, w);
  score_kernel<<<dim3(unsigned(w.chunks), unsigned(count)), kScoreKeys, scoring, stream>>>(builds, w);
  const dim3 lists(unsigned(a.centroids), unsigned(count));
  list_kernel<<<lists, kThreads, 0, stream>>>(builds, w);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  size_t scratch = w.scratch_bytes;
  const int segments = count * a.centroids;
  e = cub::DeviceSegmentedRadixSort::SortKeys(w.scratch, scratch, w.entries, w.sorted, segments * a.list_capacity,
                                              segments, w.begin, w.end, 0, 64, stream);
  if (e != cudaSuccess) return e;
  unpack_kernel<<<lists, 256, 0, stream>>>(builds, w);
  return cudaGetLastError();
}

}  // namespace skim::cuda
