// How fast can a decode step's misses cross PCIe? KV beyond GPU memory copies each missed (page,
// KV head) piece, K and V (2 x 4 KB at the 8B shape), from the pinned, mapped host pool into its
// device slot. At 512K a quest 5% step moved 1.3 GB this way and the gather was 47 of 66 ms
// under ncu (28 GB/s; H100, 2026-11-27), and copying pages ahead on a second stream made the
// step no faster (bench/results/2026-11-27-s25-host-kv-prefetch/). This measures the ceiling
// and the ways to approach it, on random pieces of a large pool:
//   dma     cudaMemcpyAsync of one contiguous 1 GiB host buffer (the copy engines' rate);
//   gather  skim's gather_kernel (page_cache.cu) at several CTAs per cache (it launches 128);
//   wide    four 16-byte loads of K and four of V in flight per thread before the stores;
//   bulk    cp.async.bulk (the TMA's 1D copies, 4 KB each) host -> shared -> slot, 4 stages a CTA.
// Each variant's slots are checked against the host pool. Standalone:
//   nvcc -O3 -arch=sm_90a -std=c++20 -Isrc -Iinclude bench/host_gather_bw.cu -o /tmp/host_gather_bw
//   /tmp/host_gather_bw [pool GiB, default 16]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "../src/backend/cuda/page_cache.cu"

using skim::cuda::PageGatherArgs;

namespace host_gather_bench {  // named: the included page_cache.cu holds an anonymous one

constexpr int kKv = 8, kPiece = 16 * 128;  // a (page, KV head) piece: 16 rows x 128 dims, bf16
constexpr size_t kPieceBytes = kPiece * sizeof(uint16_t);

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Cache (KV head) c's copies of a gather: their count, lists and the pools as 16-byte pieces.
struct CacheCopies {
  int n;
  const int32_t *page, *slot;
  const uint4 *hk, *hv;
  uint4 *sk, *sv;
};
__device__ CacheCopies cache_copies(const PageGatherArgs& a, int c) {
  return {a.counts[size_t(c) * 3],
          a.copy_page + size_t(c) * a.max_copies,
          a.copy_slot + size_t(c) * a.max_copies,
          reinterpret_cast<const uint4*>(a.host_k + size_t(c) * a.host_cache_stride),
          reinterpret_cast<const uint4*>(a.host_v + size_t(c) * a.host_cache_stride),
          reinterpret_cast<uint4*>(a.slot_k + size_t(c) * a.slot_cache_stride),
          reinterpret_cast<uint4*>(a.slot_v + size_t(c) * a.slot_cache_stride)};
}

// Four pieces a CTA of 256 threads, 64 threads a piece, each thread 4 x 16 B of K and of V in
// flight before its stores.
__global__ void __launch_bounds__(256) wide_kernel(const PageGatherArgs a, size_t pieces, size_t host_stride) {
  const CacheCopies x = cache_copies(a, int(blockIdx.y));
  const int n = x.n;
  const int32_t *copy_page = x.page, *copy_slot = x.slot;
  const uint4 *hk = x.hk, *hv = x.hv;
  uint4 *sk = x.sk, *sv = x.sv;
  const int sub = threadIdx.x / 64, lane = threadIdx.x % 64;
  for (int i = int(blockIdx.x) * 4 + sub; i < n; i += int(gridDim.x) * 4) {
    const size_t from = size_t(copy_page[i]) * host_stride, to = size_t(copy_slot[i]) * pieces;
    for (size_t e0 = size_t(lane) * 4; e0 < pieces; e0 += 256) {
      uint4 k[4], v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) k[j] = hk[from + e0 + j], v[j] = hv[from + e0 + j];
#pragma unroll
      for (int j = 0; j < 4; ++j) sk[to + e0 + j] = k[j], sv[to + e0 + j] = v[j];
    }
  }
}

// cp.async.bulk: one elected thread a CTA keeps kStages pieces (K and V) in flight from host to
// shared memory, each stage's arrival on its mbarrier, then a bulk store of the stage to its slot.
constexpr int kStages = 4;
__device__ __forceinline__ uint32_t smem(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void bar_init(uint64_t* b) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem(b)) : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra wait_%=;\n}\n" ::"r"(
          smem(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem(dst)),
               "l"(src), "r"(bytes), "r"(smem(b))
               : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(smem(src)), "r"(bytes)
               : "memory");
}

__global__ void __launch_bounds__(32) bulk_kernel(const PageGatherArgs a, size_t pieces, size_t host_stride) {
  __shared__ alignas(128) uint4 stage[kStages][2][kPiece / 8];
  __shared__ uint64_t bar[kStages];
  if (threadIdx.x != 0) return;
  const CacheCopies x = cache_copies(a, int(blockIdx.y));
  const int n = x.n;
  const int32_t *copy_page = x.page, *copy_slot = x.slot;
  const uint4 *hk = x.hk, *hv = x.hv;
  uint4 *sk = x.sk, *sv = x.sv;
  for (int s = 0; s < kStages; ++s) bar_init(&bar[s]);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  const uint32_t bytes = uint32_t(pieces * sizeof(uint4));
  auto issue = [&](int i, int s) {
    const size_t from = size_t(copy_page[i]) * host_stride;
    bar_expect(&bar[s], 2 * bytes);
    bulk_load(stage[s][0], hk + from, bytes, &bar[s]);
    bulk_load(stage[s][1], hv + from, bytes, &bar[s]);
  };
  const int first = int(blockIdx.x), step = int(gridDim.x);
  int issued = 0;
  for (int i = first; i < n && issued < kStages; i += step) issue(i, issued++);
  int k = 0;
  for (int i = first; i < n; i += step, ++k) {
    const int s = k % kStages;
    bar_wait(&bar[s], uint32_t((k / kStages) & 1));
    const size_t to = size_t(copy_slot[i]) * pieces;
    bulk_store(sk + to, stage[s][0], bytes);
    bulk_store(sv + to, stage[s][1], bytes);
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");  // the stage may be refilled
    const int next = i + kStages * step;
    if (next < n) issue(next, s);
  }
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// The compute a prefetch's gather overlaps, reduced to its bytes: every SM streaming a device
// buffer (as the step's GEMVs stream weights).
__global__ void __launch_bounds__(256) stream_kernel(const uint4* __restrict__ x, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = x[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads
}

}  // namespace host_gather_bench

using namespace host_gather_bench;
using skim::cuda::gather_kernel;

int main(int argc, char** argv) {
  const double pool_gib = argc > 1 ? std::atof(argv[1]) : 16.0;
  const size_t host_pages = size_t(pool_gib * double(1ull << 30) / (2.0 * kKv * kPieceBytes));  // K and V pools
  const size_t pool_elems = host_pages * kKv * kPiece;
  const int copies = 4096, slots = 8192;  // per cache (KV head): 8 x 4096 x 8 KB = 256 MB a gather
  std::printf("host pools 2 x %.1f GiB (%zu pages of %d KV heads), %d copies a KV head (%.0f MB a gather)\n",
              pool_elems * 2.0 / (1ull << 30), host_pages, kKv, copies, 2.0 * kKv * copies * kPieceBytes / 1e6);
  uint16_t *hk = nullptr, *hv = nullptr, *dk = nullptr, *dv = nullptr;
  ok(cudaHostAlloc(reinterpret_cast<void**>(&hk), pool_elems * 2, cudaHostAllocMapped), "cudaHostAlloc");
  ok(cudaHostAlloc(reinterpret_cast<void**>(&hv), pool_elems * 2, cudaHostAllocMapped), "cudaHostAlloc");
  for (size_t i = 0; i < pool_elems; i += 4096 / 2) hk[i] = uint16_t(i * 7), hv[i] = uint16_t(i * 13);  // touch, vary
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < pool_elems; i += 997) hk[i] = uint16_t(rng()), hv[i] = uint16_t(rng());
  const size_t slot_elems = size_t(kKv) * slots * kPiece;
  ok(cudaMalloc(&dk, slot_elems * 2), "cudaMalloc");
  ok(cudaMalloc(&dv, slot_elems * 2), "cudaMalloc");
  // Random distinct pages per KV head into random distinct slots.
  std::vector<int32_t> page(size_t(kKv) * copies), slot(size_t(kKv) * copies), counts(size_t(kKv) * 3, 0);
  for (int c = 0; c < kKv; ++c) {
    std::vector<int32_t> perm(slots);
    for (int s = 0; s < slots; ++s) perm[size_t(s)] = s;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int i = 0; i < copies; ++i) {
      page[size_t(c) * copies + i] = int32_t(rng() % host_pages);
      slot[size_t(c) * copies + i] = perm[size_t(i)];
    }
    counts[size_t(c) * 3] = copies;
  }
  int32_t *d_page, *d_slot, *d_counts;
  ok(cudaMalloc(&d_page, page.size() * 4), "cudaMalloc");
  ok(cudaMalloc(&d_slot, slot.size() * 4), "cudaMalloc");
  ok(cudaMalloc(&d_counts, counts.size() * 4), "cudaMalloc");
  cudaMemcpy(d_page, page.data(), page.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_slot, slot.data(), slot.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_counts, counts.data(), counts.size() * 4, cudaMemcpyHostToDevice);
  uint16_t *mk = nullptr, *mv = nullptr;
  ok(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mk), hk, 0), "cudaHostGetDevicePointer");
  ok(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mv), hv, 0), "cudaHostGetDevicePointer");
  const PageGatherArgs a{.copy_page = d_page, .copy_slot = d_slot, .counts = d_counts, .max_copies = copies,
                         .host_k = mk, .host_v = mv, .slot_k = dk, .slot_v = dv, .page_elems = size_t(kPiece),
                         .host_page_stride = size_t(kKv) * kPiece, .caches = kKv, .host_cache_stride = size_t(kPiece),
                         .slot_cache_stride = size_t(slots) * kPiece};
  const double bytes = 2.0 * kKv * copies * kPieceBytes;

  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto time_ms = [&](auto&& launch) {
    launch();
    ok(cudaDeviceSynchronize(), "warm-up");
    cudaEventRecord(e0);
    const int reps = 5;
    for (int r = 0; r < reps; ++r) launch();
    cudaEventRecord(e1);
    ok(cudaEventSynchronize(e1), "run");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    return double(ms) / reps;
  };
  // Every copy's K and V in its slot, equal to the host piece.
  auto check = [&](const char* what) {
    std::vector<uint16_t> got(kPiece);
    int bad = 0;
    for (int c = 0; c < kKv; ++c)
      for (int i = 0; i < copies; i += 97) {
        const size_t s = size_t(c) * copies + i;
        const uint16_t* want_k = hk + size_t(page[s]) * kKv * kPiece + size_t(c) * kPiece;
        const uint16_t* want_v = hv + size_t(page[s]) * kKv * kPiece + size_t(c) * kPiece;
        const size_t at = size_t(c) * slots * kPiece + size_t(slot[s]) * kPiece;
        cudaMemcpy(got.data(), dk + at, kPieceBytes, cudaMemcpyDeviceToHost);
        bad += std::memcmp(got.data(), want_k, kPieceBytes) != 0;
        cudaMemcpy(got.data(), dv + at, kPieceBytes, cudaMemcpyDeviceToHost);
        bad += std::memcmp(got.data(), want_v, kPieceBytes) != 0;
      }
    if (bad) std::printf("  %s: %d pieces differ from the host pool\n", what, bad);
  };
  auto clear = [&] {
    cudaMemset(dk, 0, slot_elems * 2);
    cudaMemset(dv, 0, slot_elems * 2);
  };

  // The copy engines: one contiguous copy as large as the slots, then the gather's own pieces
  // through cudaMemcpyBatchAsync (host-known lists: a decode step's lists live on the device, so
  // this is the engines' rate on 4 KB pieces, not a form the step's graph could use).
  const size_t dma_bytes = slot_elems * 2;
  const double dma_ms = time_ms([&] { ok(cudaMemcpyAsync(dk, hk, dma_bytes, cudaMemcpyHostToDevice), "dma"); });
  std::printf("| variant | CTAs a KV head | ms | GB/s |\n|---|---|---|---|\n");
  std::printf("| dma (cudaMemcpyAsync, %.0f MB contiguous) | | %.3f | %.1f |\n", dma_bytes / 1e6, dma_ms,
              dma_bytes / dma_ms / 1e6);
  {
    std::vector<void*> dst;
    std::vector<const void*> src;
    for (int c = 0; c < kKv; ++c)
      for (int i = 0; i < copies; ++i) {
        const size_t s = size_t(c) * copies + i;
        const size_t from = size_t(page[s]) * kKv * kPiece + size_t(c) * kPiece;
        const size_t at = size_t(c) * slots * kPiece + size_t(slot[s]) * kPiece;
        dst.push_back(dk + at), src.push_back(hk + from);
        dst.push_back(dv + at), src.push_back(hv + from);
      }
    std::vector<size_t> sizes(dst.size(), kPieceBytes);
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t attr_at = 0;
    cudaStream_t s;
    ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    clear();
    const double ms = time_ms([&] {
      ok(cudaMemcpyBatchAsync(dst.data(), src.data(), sizes.data(), dst.size(), &attr, &attr_at, 1, s), "batch");
      ok(cudaStreamSynchronize(s), "batch sync");
    });
    check("dma batch");
    std::printf("| dma batch (cudaMemcpyBatchAsync, %zu pieces of 4 KB) | | %.3f | %.1f |\n", dst.size(), ms,
                bytes / ms / 1e6);
  }
  // A kernel form at each grid: its time, its bandwidth, its slots checked.
  const size_t pieces = size_t(kPiece) / 8, host_stride = size_t(kKv) * kPiece / 8;
  auto variant = [&](const char* name, std::initializer_list<int> grids, auto&& launch) {
    for (int ctas : grids) {
      clear();
      const double ms = time_ms([&] { launch(dim3(unsigned(ctas), kKv)); });
      ok(cudaGetLastError(), name);
      check(name);
      std::printf("| %s | %d | %.3f | %.1f |\n", name, ctas, ms, bytes / ms / 1e6);
    }
  };
  variant("gather (skim's, 256 threads)", {1, 2, 4, 8, 16, 128},
          [&](dim3 g) { gather_kernel<<<g, 256>>>(a, pieces, host_stride); });
  variant("wide (8 loads in flight a thread)", {4, 128},
          [&](dim3 g) { wide_kernel<<<g, 256>>>(a, pieces, host_stride); });
  variant("bulk (cp.async.bulk, 4 stages)", {4, 16, 64, 256},
          [&](dim3 g) { bulk_kernel<<<g, 32>>>(a, pieces, host_stride); });

  // Overlap: the gather on a stream of its own beside a device stream that fills every SM, each
  // alone and both at once. A prefetch pays where both-at-once takes about the longer of the two.
  {
    const size_t stream_bytes = size_t(2) << 30;
    uint4* buf = nullptr;
    uint32_t* sink = nullptr;
    ok(cudaMalloc(&buf, stream_bytes), "cudaMalloc");
    ok(cudaMalloc(&sink, 4), "cudaMalloc");
    cudaMemset(buf, 1, stream_bytes);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaStream_t side;
    ok(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "stream");
    const int passes = 3;  // about as long as one gather
    auto compute = [&](cudaStream_t s) {
      for (int p = 0; p < passes; ++p) stream_kernel<<<sms * 8, 256, 0, s>>>(buf, stream_bytes / 16, sink);
    };
    cudaEvent_t joined;
    cudaEventCreateWithFlags(&joined, cudaEventDisableTiming);
    const double alone = time_ms([&] { compute(0); });
    std::printf("\n| overlap: gather CTAs a KV head | gather alone ms | device stream alone ms | both ms |\n"
                "|---|---|---|---|\n");
    for (int ctas : {2, 4, 16, 128}) {
      const dim3 g(unsigned(ctas), kKv);
      const double gather_ms = time_ms([&] { gather_kernel<<<g, 256>>>(a, pieces, host_stride); });
      const double both = time_ms([&] {
        cudaEventRecord(joined, 0);
        cudaStreamWaitEvent(side, joined);
        gather_kernel<<<g, 256, 0, side>>>(a, pieces, host_stride);
        compute(0);
        cudaEventRecord(joined, side);
        cudaStreamWaitEvent(0, joined);
      });
      std::printf("| %d | %.3f | %.3f | %.3f |\n", ctas, gather_ms, alone, both);
    }
  }
  return 0;
}
