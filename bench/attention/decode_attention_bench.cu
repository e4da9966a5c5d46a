// Decode-attention benchmark: skim's paged split-KV kernel (the library default and a few
// tuning variants) on Llama-3.1-8B layer shapes (32 query heads, 8 KV heads, head_dim 128),
// contexts 8K/32K/128K, batch 1 and 8, against the measured device-to-device copy bandwidth.
// Rows besides the default: "contig" = the default kernel on a cache whose pages are in
// order (what shuffled pages cost); "legacy" = another revision's kernel (gpu-check.sh
// compiles it in when it finds build-legacy/legacy_impl.cuh); "read_paged" /
// "read_contig" = kernels that only read the same K/V bytes (through the shuffled page table
// / as one contiguous stream) and do no math: the bandwidth ceiling of each access pattern.
//
// Method (DESIGN.md section 8): CUDA events around each call, warm-up first, median of many
// calls; the cache is rotated among enough copies that each call reads at least ~4x the L2
// size before it comes back to the same bytes, so the numbers are HBM numbers. Page ids are
// a random permutation (non-contiguous pages, as in a long-running server). Inputs are random
// bf16, never zeros.
//
//   decode_attention_bench [--out FILE.json] [--quick] [--variants] [--point BATCH CTX]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

// One translation unit: the library source is compiled in here, so that each kernel
// template is instantiated once (two non-rdc TUs instantiating the same kernel register two
// device functions under one host stub, and attributes set on one do not reach the other).
#include "backend/cuda/paged_decode_attention.cu"
#ifdef SKIM_BENCH_LEGACY
// Another revision's kernel, namespace renamed to skim::cuda::legacy (made from git history:
// `git show <rev>:src/backend/cuda/paged_decode_attention_impl.cuh`, see gpu-check.sh).
#include SKIM_BENCH_LEGACY
#endif

#define CK(call)                                                                      \
  do {                                                                                \
    cudaError_t _e = (call);                                                          \
    if (_e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,               \
                   cudaGetErrorString(_e));                                           \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

namespace {

using skim::PagedDecodeArgs;
namespace detail = skim::cuda::detail;

__global__ void fill_random_bf16(uint16_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;  // splitmix64
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    const float u = float(x >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
    const uint32_t bits = __float_as_uint(u);
    p[i] = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

// Keeps the GPU busy while the host queues the timed calls, so that every call waits in the
// queue and the events measure GPU time, not the host's launch rate.
__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Read-only ceilings. Each warp reads whole 4 KB (K) + 4 KB (V) page slices, 16 bytes per
// lane per load, every load of a slice in flight at once. PAGED: item = (sequence, page, KV
// head) through the page table, so neighbouring warps read the 8 heads' slices of one page
// together (32 KB contiguous of K and of V: the best locality a paged cache allows); else
// the slices lie back to back. The xor keeps the loads alive; nothing is written in practice.
template <bool PAGED>
__global__ void __launch_bounds__(256) read_ceiling(const uint4* k, const uint4* v,
                                                    const int32_t* table, int pages_per_seq,
                                                    int num_kv_heads, long items, uint4* sink) {
  constexpr int kVecs = 4096 / 16;  // uint4 per page slice (head_dim 128, 16 tokens)
  const int lane = threadIdx.x & 31;
  const long warps = long(gridDim.x) * (blockDim.x / 32);
  uint4 x = make_uint4(0u, 0u, 0u, 0u);
  for (long it = blockIdx.x * long(blockDim.x / 32) + (threadIdx.x >> 5); it < items; it += warps) {
    size_t slice;
    if (PAGED) {
      const long per_seq = long(num_kv_heads) * pages_per_seq;
      const long b = it / per_seq, pg = it % per_seq / num_kv_heads, kvh = it % num_kv_heads;
      slice = size_t(__ldg(table + b * pages_per_seq + pg)) * num_kv_heads + kvh;
    } else {
      slice = size_t(it);
    }
    uint4 r[2 * kVecs / 32];
#pragma unroll
    for (int j = 0; j < kVecs / 32; ++j) {
      r[j] = __ldcs(k + slice * kVecs + lane + 32 * j);
      r[kVecs / 32 + j] = __ldcs(v + slice * kVecs + lane + 32 * j);
    }
#pragma unroll
    for (int j = 0; j < 2 * kVecs / 32; ++j) {
      x.x ^= r[j].x, x.y ^= r[j].y, x.z ^= r[j].z, x.w ^= r[j].w;
    }
  }
  if (x.x == 0x9e3779b9u && x.y == 0x7f4a7c15u) sink[0] = x;  // practically never
}

struct Stats {
  double median_us = 0, p10_us = 0, p90_us = 0;
};

Stats stats(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double f) { return 1000.0 * ms[std::min(ms.size() - 1, size_t(f * ms.size()))]; };
  return {at(0.5), at(0.1), at(0.9)};
}

// Times fn(i) per call with events; returns stats over `iters` calls after `warm` calls.
template <class F>
Stats time_calls(F&& fn, int warm, int iters) {
  for (int i = 0; i < warm; ++i) fn(i);
  CK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  spin<<<1, 1>>>(20000ll * 2000 * iters / 1000);  // ~20 us per queued call at 2 GHz
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(ev[2 * i]));
    fn(warm + i);
    CK(cudaEventRecord(ev[2 * i + 1]));
  }
  CK(cudaDeviceSynchronize());
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) CK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  return stats(ms);
}

double copy_bandwidth(double& median_us, size_t& bytes_out) {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 0x5a, bytes));
  const Stats s = time_calls([&](int) { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); },
                             3, 20);
  CK(cudaFree(a));
  CK(cudaFree(b));
  median_us = s.median_us;
  bytes_out = 2 * bytes;
  return 2.0 * bytes / (s.median_us * 1e-6);  // read + write
}

using LaunchFn = cudaError_t (*)(const PagedDecodeArgs&, cudaStream_t, detail::Plan*);

// Where a variant's pages lie: the shuffled table (the headline), each sequence's pages in
// order, or in order in a head-major pool [kv_head][page][token][dim] (every KV head's K and V
// one contiguous stream per sequence, as SDPA reads them). Only shuffled rows are compared
// with the default's output (the others read the same bytes as different tokens).
// kKvInterleaved: pages in order, K and V of one (page, KV head) adjacent (8 KB contiguous
// at head_dim 128) in one pool, instead of two pools at unrelated addresses.
enum class Layout { kShuffled, kContig, kHeadMajor, kKvInterleaved };

struct VariantInfo {
  const char* name;
  LaunchFn launch;
  cudaError_t (*per_sm)(int&);
  Layout layout = Layout::kShuffled;
};

// WAVES > 1 plans for that many times the resident CTA slots (smaller chunks, several waves).
// DYN: pages taken from a shared counter (args.deterministic = false).
template <int W, int S, int WAVES = 1, bool DYN = false>
cudaError_t launch_variant(const PagedDecodeArgs& a, cudaStream_t s, detail::Plan* plan) {
  int cap = 0;
  if (WAVES > 1) {
    const cudaError_t e = detail::Variant<128, W, S>::capacity(cap);
    if (e != cudaSuccess) return e;
  }
  PagedDecodeArgs b = a;
  b.deterministic = !DYN;
  return detail::Variant<128, W, S>::launch(b, s, cap * WAVES, plan);
}
// One CTA per (sequence, KV unit): no merge kernel; at batch 8 that is 64 CTAs on 132 SMs.
template <int W, int S>
cudaError_t launch_direct(const PagedDecodeArgs& a, cudaStream_t s, detail::Plan* plan) {
  const int units = a.batch * a.num_kv_heads * ((a.group_size() + detail::kMaxRows - 1) / detail::kMaxRows);
  return detail::Variant<128, W, S>::launch(a, s, units, plan);
}
// The library's choice of kernel (detail::DefaultVariant).
cudaError_t launch_default(const PagedDecodeArgs& a, cudaStream_t s, detail::Plan* plan) {
  return detail::DefaultVariant<128>::launch(a, s, 0, plan);
}
template <int W, int S>
cudaError_t per_sm_variant(int& n) {
  return detail::Variant<128, W, S>::ctas_per_sm(n);
}

const VariantInfo kVariants[] = {
    {"w8s2dyn", launch_variant<8, 2, 1, true>, per_sm_variant<8, 2>},
    {"w4s2", launch_variant<4, 2>, per_sm_variant<4, 2>},
    {"w8s3", launch_variant<8, 3>, per_sm_variant<8, 3>},
    {"contig_dyn", launch_variant<8, 2, 1, true>, per_sm_variant<8, 2>, Layout::kContig},
    {"headmajor", launch_variant<8, 2>, per_sm_variant<8, 2>, Layout::kHeadMajor},
    {"hm_dyn", launch_variant<8, 2, 1, true>, per_sm_variant<8, 2>, Layout::kHeadMajor},
    {"direct", launch_direct<8, 2>, per_sm_variant<8, 2>},
    // More bytes in flight per SM, or every SM busy, on pages in order.
    {"contig_w8s3", launch_variant<8, 3>, per_sm_variant<8, 3>, Layout::kContig},
    {"contig_w4s2", launch_variant<4, 2>, per_sm_variant<4, 2>, Layout::kContig},
    {"contig_w4s3", launch_variant<4, 3>, per_sm_variant<4, 3>, Layout::kContig},
    {"contig_w6s2", launch_variant<6, 2>, per_sm_variant<6, 2>, Layout::kContig},
    {"contig_w4s4", launch_variant<4, 4>, per_sm_variant<4, 4>, Layout::kContig},
    {"contig_w8s3dyn", launch_variant<8, 3, 1, true>, per_sm_variant<8, 3>, Layout::kContig},
    {"kvi", launch_default, per_sm_variant<8, 2>, Layout::kKvInterleaved},
    {"kvi_w8s2", launch_variant<8, 2>, per_sm_variant<8, 2>, Layout::kKvInterleaved},
    {"kvi_w8s3", launch_variant<8, 3>, per_sm_variant<8, 3>, Layout::kKvInterleaved},
    {"kvi_dyn", launch_variant<8, 3, 1, true>, per_sm_variant<8, 3>, Layout::kKvInterleaved},
};

#ifdef SKIM_BENCH_LEGACY
cudaError_t launch_legacy(const PagedDecodeArgs& a, cudaStream_t s, detail::Plan* plan) {
  if (plan) *plan = detail::Plan{};
  return skim::cuda::legacy::DefaultVariant<128>::launch(a, s);
}
cudaError_t per_sm_legacy(int& n) { return skim::cuda::legacy::DefaultVariant<128>::ctas_per_sm(n); }
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "decode_attention_bench.json";
  bool quick = false, variants = false;
  int only_batch = 0, only_ctx = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--point") && i + 2 < argc) {
      only_batch = std::atoi(argv[++i]);
      only_ctx = std::atoi(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--variants")) variants = true;
  }

  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CK(cudaDriverGetVersion(&driver));
  CK(cudaRuntimeGetVersion(&runtime));
  double copy_us = 0;
  size_t copy_bytes = 0;
  const double copy_bw = copy_bandwidth(copy_us, copy_bytes);
  std::printf("device %s, %d SMs, L2 %d MB, copy %.0f GB/s (D2D 1 GiB, read+write, %.1f us)\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, copy_bw / 1e9, copy_us);

  const int H = 32, HKV = 8, D = 128, PS = 16;
  const std::vector<int> batches = {1, 8};
  const std::vector<int> contexts = quick ? std::vector<int>{8192, 32768} : std::vector<int>{8192, 32768, 131072};
  const size_t l2 = size_t(prop.l2CacheSize);

  FILE* js = std::fopen(out_path.c_str(), "w");
  if (!js) {
    std::perror(out_path.c_str());
    return 1;
  }
  std::fprintf(js, "{\n  \"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %zu, \"cuda_driver\": %d, "
               "\"cuda_runtime\": %d,\n  \"copy_bw_bytes_per_s\": %.6e, \"copy_us\": %.3f,\n  \"points\": [\n",
               prop.name, prop.multiProcessorCount, l2, driver, runtime, copy_bw, copy_us);

  std::mt19937_64 rng(20261122);
  bool first_point = true;
  std::printf("%5s %7s %8s %11s %9s %8s %6s  %s\n", "batch", "ctx", "MB", "variant", "med_us", "GB/s",
              "frac", "plan");
  for (int B : batches)
    for (int L : contexts) {
      if (only_batch && (B != only_batch || L != only_ctx)) continue;
      const int pages_per_seq = L / PS;
      const size_t kv_bytes = size_t(B) * L * HKV * D * 2 * 2;
      // Enough copies that a call's bytes were last touched >= 4 L2 sizes ago.
      const int copies = int(std::max<size_t>(1, (4 * l2 + kv_bytes - 1) / kv_bytes + 1));
      const size_t pages = size_t(copies) * B * pages_per_seq;
      const size_t pool_elems = pages * HKV * PS * D;
      uint16_t *k = nullptr, *v = nullptr, *q = nullptr;
      int32_t *table = nullptr, *lens = nullptr;
      float *o = nullptr, *lse = nullptr, *o_ref = nullptr;
      void* ws = nullptr;
      CK(cudaMalloc(&k, pool_elems * 2));
      CK(cudaMalloc(&v, pool_elems * 2));
      uint16_t* kv = nullptr;  // Layout::kKvInterleaved: K and V of the same pages, one pool
      if (variants) {
        CK(cudaMalloc(&kv, 2 * pool_elems * 2));
        fill_random_bf16<<<1024, 256>>>(kv, 2 * pool_elems, rng());
      }
      CK(cudaMalloc(&q, size_t(copies) * B * H * D * 2));
      CK(cudaMalloc(&table, size_t(copies) * B * pages_per_seq * 4));
      CK(cudaMalloc(&lens, size_t(B) * 4));
      CK(cudaMalloc(&o, size_t(B) * H * D * 4));
      CK(cudaMalloc(&o_ref, size_t(B) * H * D * 4));
      CK(cudaMalloc(&lse, size_t(B) * H * 4));
      const size_t ws_bytes = 64 << 20;
      CK(cudaMalloc(&ws, ws_bytes));
      CK(cudaMemset(ws, 0, ws_bytes));
      fill_random_bf16<<<1024, 256>>>(k, pool_elems, rng());
      fill_random_bf16<<<1024, 256>>>(v, pool_elems, rng());
      fill_random_bf16<<<64, 256>>>(q, size_t(copies) * B * H * D, rng());
      CK(cudaGetLastError());
      std::vector<int32_t> perm(pages);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      CK(cudaMemcpy(table, perm.data(), pages * 4, cudaMemcpyHostToDevice));
      // Same cache with contiguous page ids (each sequence's pages in order): what paging
      // with shuffled pages costs against a contiguous cache.
      int32_t* table_contig = nullptr;
      CK(cudaMalloc(&table_contig, pages * 4));
      {
        std::vector<int32_t> ident(pages);
        std::iota(ident.begin(), ident.end(), 0);
        CK(cudaMemcpy(table_contig, ident.data(), pages * 4, cudaMemcpyHostToDevice));
      }
      std::vector<int32_t> hl(B, L);
      CK(cudaMemcpy(lens, hl.data(), B * 4, cudaMemcpyHostToDevice));

      std::vector<PagedDecodeArgs> args(copies);
      for (int c = 0; c < copies; ++c) {
        PagedDecodeArgs& a = args[c];
        a.batch = B;
        a.num_heads = H;
        a.num_kv_heads = HKV;
        a.head_dim = D;
        a.page_size = PS;
        a.max_pages_per_seq = pages_per_seq;
        a.max_seq_len = L;
        a.scale = 1.0f / std::sqrt(float(D));
        a.q = q + size_t(c) * B * H * D;
        a.k_pool = k;
        a.v_pool = v;
        a.page_table = table + size_t(c) * B * pages_per_seq;
        a.seq_lens = lens;
        a.o = o;
        a.lse = lse;
        a.workspace = ws;
        a.workspace_bytes = ws_bytes;
      }
      const double bytes = double(kv_bytes) + double(B) * H * D * 2 + double(B) * H * (D + 1) * 4;
      const int iters = L * B >= 1 << 20 ? 60 : 200;

      struct Row {
        std::string name;
        Stats s;
        double max_diff;
        detail::Plan plan;
        int per_sm;
      };
      std::vector<Row> rows;
      // Library default first; its output is the reference the variants are compared with.
      {
        Row r{"default", {}, 0.0, {}, 0};
        r.s = time_calls([&](int i) { CK(skim::cuda::paged_decode_attention(args[i % copies], 0)); },
                         20, iters);
        CK(skim::cuda::paged_decode_attention(args[0], 0));
        CK(cudaMemcpy(o_ref, o, size_t(B) * H * D * 4, cudaMemcpyDeviceToDevice));
        CK(detail::DefaultVariant<128>::launch(args[0], 0, 0, &r.plan));
        CK(detail::DefaultVariant<128>::ctas_per_sm(r.per_sm));
        rows.push_back(r);
      }
      {
        Row r{"contig", {}, 0.0, {}, 0};
        std::vector<PagedDecodeArgs> cargs = args;
        for (int c = 0; c < copies; ++c) cargs[c].page_table = table_contig + size_t(c) * B * pages_per_seq;
        r.s = time_calls([&](int i) { CK(skim::cuda::paged_decode_attention(cargs[i % copies], 0)); },
                         20, iters);
        r.plan = rows[0].plan;
        r.per_sm = rows[0].per_sm;
        rows.push_back(r);
      }
      // Read-only ceilings over the same bytes (and, for "paged", the same page ids).
      {
        int sms = prop.multiProcessorCount;
        const long items = long(B) * HKV * pages_per_seq;
        for (int paged = 1; paged >= 0; --paged) {
          Row r{paged ? "read_paged" : "read_contig", {}, 0.0, rows[0].plan, 0};
          r.s = time_calls(
              [&](int i) {
                const int c = i % copies;
                if (paged)
                  read_ceiling<true><<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(k), reinterpret_cast<const uint4*>(v),
                                                       table + size_t(c) * B * pages_per_seq, pages_per_seq, HKV, items,
                                                       reinterpret_cast<uint4*>(o));
                else
                  read_ceiling<false><<<sms * 8, 256>>>(
                      reinterpret_cast<const uint4*>(k) + size_t(c) * items * 256,
                      reinterpret_cast<const uint4*>(v) + size_t(c) * items * 256, nullptr, pages_per_seq, HKV, items,
                      reinterpret_cast<uint4*>(o));
                CK(cudaGetLastError());
              },
              20, iters);
          r.max_diff = 0.0;
          rows.push_back(r);
        }
      }
      std::vector<VariantInfo> vlist;
#ifdef SKIM_BENCH_LEGACY
      vlist.push_back({"legacy", launch_legacy, per_sm_legacy});
#endif
      if (variants) vlist.insert(vlist.end(), std::begin(kVariants), std::end(kVariants));
      {
        for (const auto& vi : vlist) {
          Row r{vi.name, {}, 0.0, {}, 0};
          // Each variant lays the workspace out its own way: start from zeros.
          CK(cudaMemset(ws, 0, ws_bytes));
          std::vector<PagedDecodeArgs> vargs = args;
          if (vi.layout != Layout::kShuffled)
            for (int c = 0; c < copies; ++c) {
              vargs[c].page_table = table_contig + size_t(c) * B * pages_per_seq;
              if (vi.layout == Layout::kKvInterleaved) {
                vargs[c].k_pool = kv;
                vargs[c].v_pool = kv + size_t(PS) * D;
                vargs[c].page_stride = size_t(HKV) * 2 * PS * D;
                vargs[c].head_stride = size_t(2) * PS * D;
              }
              if (vi.layout == Layout::kHeadMajor) {
                vargs[c].page_stride = size_t(PS) * D;
                vargs[c].head_stride = pages * PS * D;
              }
            }
          cudaError_t e = vi.launch(vargs[0], 0, &r.plan);
          if (e == cudaSuccess) e = cudaDeviceSynchronize();
          if (e != cudaSuccess) {  // report and go on with the other variants
            std::printf("variant %s: %s\n", vi.name, cudaGetErrorString(e));
            cudaGetLastError();
            continue;
          }
          r.s = time_calls([&](int i) { CK(vi.launch(vargs[i % copies], 0, nullptr)); }, 20, iters);
          CK(vi.per_sm(r.per_sm));
          if (vi.layout != Layout::kShuffled) {
            rows.push_back(r);
            continue;
          }
          CK(vi.launch(args[0], 0, nullptr));
          CK(cudaDeviceSynchronize());
          std::vector<float> a(size_t(B) * H * D), b(a.size());
          CK(cudaMemcpy(a.data(), o, a.size() * 4, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(b.data(), o_ref, b.size() * 4, cudaMemcpyDeviceToHost));
          for (size_t j = 0; j < a.size(); ++j)
            r.max_diff = std::max(r.max_diff, double(std::fabs(a[j] - b[j])));
          rows.push_back(r);
        }
      }

      std::fprintf(js, "%s    {\"batch\": %d, \"ctx\": %d, \"num_heads\": %d, \"num_kv_heads\": %d, "
                   "\"head_dim\": %d, \"bytes\": %.0f, \"kv_copies\": %d, \"iters\": %d, \"runs\": [\n",
                   first_point ? "" : ",\n", B, L, H, HKV, D, bytes, copies, iters);
      first_point = false;
      for (size_t j = 0; j < rows.size(); ++j) {
        const Row& r = rows[j];
        const double bw = bytes / (r.s.median_us * 1e-6);
        std::printf("%5d %7d %8.1f %11s %9.2f %8.0f %6.3f  %d CTAs x %d pages, w%ds%d, %d CTA/SM%s\n", B, L,
                    bytes / 1e6, r.name.c_str(), r.s.median_us, bw / 1e9, bw / copy_bw,
                    r.plan.num_chunks * 8 * B, r.plan.chunk_pages, r.plan.warps, r.plan.stages, r.per_sm,
                    r.max_diff > 1e-4 ? "  OUTPUT DIFFERS FROM DEFAULT" : "");
        std::fprintf(js, "      {\"name\": \"%s\", \"median_us\": %.3f, \"p10_us\": %.3f, \"p90_us\": %.3f, "
                     "\"bw_bytes_per_s\": %.6e, \"frac_copy\": %.4f, \"max_abs_diff_vs_default\": %.3e, "
                     "\"ctas_per_sm\": %d}%s\n",
                     r.name.c_str(), r.s.median_us, r.s.p10_us, r.s.p90_us, bw, bw / copy_bw, r.max_diff,
                     r.per_sm, j + 1 < rows.size() ? "," : "");
      }
      std::fprintf(js, "    ], \"plan\": {\"num_chunks\": %d, \"chunk_pages\": %d, \"warps\": %d, \"stages\": %d}}",
                   rows[0].plan.num_chunks, rows[0].plan.chunk_pages, rows[0].plan.warps, rows[0].plan.stages);
      for (void* p : {(void*)k, (void*)v, (void*)q, (void*)table, (void*)lens, (void*)o, (void*)o_ref,
                      (void*)lse, ws, (void*)table_contig, (void*)kv})
        CK(cudaFree(p));
    }
  std::fprintf(js, "\n  ]\n}\n");
  std::fclose(js);
  return 0;
}
