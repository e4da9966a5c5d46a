// CUDA paged prefill attention against its CPU reference (the decode reference, one row at a
// time) on fresh random inputs: head_dim 64 and 128, GQA groups 1, 3 (SmolLM2's: row tiles
// split tokens), 4, 8, 12 and 16, chunks that start and end inside pages and key steps, whole
// prompts of several row tiles, shuffled page ids, every kernel. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "../test_random.h"
#include "backend/cpu/paged_prefill_attention.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/paged_prefill_attention.cuh"
#include "core/dtype.h"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

// Every kernel where the device has it (the wgmma one on Hopper only).
constexpr cuda::PrefillKernel kKernels[] = {cuda::PrefillKernel::kMma64, cuda::PrefillKernel::kMma128,
                                            cuda::PrefillKernel::kWgmma, cuda::PrefillKernel::kWgmmaWs,
                                            cuda::PrefillKernel::kWgmmaPingpong};
const char* const kNames[] = {"mma 64 rows", "mma 128 rows", "wgmma", "wgmma warp-specialised", "wgmma ping-pong"};

std::vector<uint16_t> random_bf16(size_t n) {
  std::vector<float> f = test::random_vector(n);
  std::vector<uint16_t> out(n);
  std::transform(f.begin(), f.end(), out.begin(), f32_to_bf16);
  return out;
}

// Runs every kernel the device has on `a` (device pointers, writing `o` and `lse`) and checks
// the outputs against the reference's, every one written (they start as NaN).
void expect_every_kernel_matches(const PagedPrefillArgs& a, cuda::DeviceBuffer<float>& o, cuda::DeviceBuffer<float>& lse,
                                 const std::vector<float>& want_o, const std::vector<float>& want_lse,
                                 const testing::Message& what) {
  for (cuda::PrefillKernel kernel : kKernels) {
    if (!cuda::prefill_kernel_available(kernel)) continue;
    SCOPED_TRACE(testing::Message(what) << ", " << kNames[int(kernel)]);
    cuda::check(cudaMemset(o.data(), 0xff, o.bytes()), "cudaMemset");
    ASSERT_EQ(cuda::paged_prefill_attention_with(a, kernel, nullptr), cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "prefill attention");
    // Probabilities are rounded to bf16 before P.V (as in flash attention), 2^-9 relative per
    // weight, and the normaliser sums those rounded weights, so o stays a weighted mean of the
    // v rows (|v| <~ 4 here): its error is bounded by about 2^-8 max|v| and is a few 1e-3 in
    // practice (a relative measure is no good: o of few keys can be near 0). lse measured on an
    // H100 within 1.5e-3. A wrong mask, page or head errs by O(1).
    auto max_err = [](const std::vector<float>& got, const std::vector<float>& want) {
      double err = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double e = std::fabs(double(got[i]) - want[i]);
        err = std::isnan(e) ? INFINITY : std::max(err, e);
      }
      return err;
    };
    const std::vector<float> got = to_host(o);
    const double o_err = max_err(got, want_o), lse_err = max_err(to_host(lse), want_lse);
    EXPECT_LT(o_err, 2e-2);
    EXPECT_LT(lse_err, 3e-3);
    std::printf("[ prefill  ] %s, %s: o abs err %.2e, lse err %.2e\n", testing::Message(what).GetString().c_str(),
                kNames[int(kernel)], o_err, lse_err);
  }
}

TEST(CudaPagedPrefillAttention, MatchesCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  struct Case { int d, kv_heads, group, start, n; };
  // The last three: few rows over a long prefix, where the keys split over several CTAs and
  // the partials are merged (rectification's shape); unaligned starts and lengths.
  for (Case c : {Case{128, 1, 4, 0, 37}, Case{128, 2, 4, 37, 50}, Case{64, 4, 1, 5, 16}, Case{128, 2, 8, 250, 130},
                 Case{64, 1, 12, 19, 33}, Case{128, 8, 4, 1000, 7}, Case{128, 8, 4, 20000 - 29, 32},
                 Case{64, 2, 8, 9001, 19}, Case{128, 1, 16, 4097, 40}, Case{128, 3, 3, 0, 301},
                 Case{64, 3, 3, 70, 129}, Case{128, 2, 4, 0, 1000}, Case{128, 1, 1, 3, 250}}) {
    SCOPED_TRACE(testing::Message() << "d " << c.d << " kv " << c.kv_heads << " group " << c.group << " rows ["
                                    << c.start << ", " << c.start + c.n << ")");
    const int heads = c.kv_heads * c.group, ps = 16, last = c.start + c.n - 1;
    const int pages = last / ps + 1, pool_pages = pages + 3;
    std::vector<int32_t> table(static_cast<size_t>(pool_pages));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), test::rng());
    std::vector<uint16_t> q = random_bf16(size_t(c.n) * heads * c.d);
    std::vector<uint16_t> k = random_bf16(size_t(pool_pages) * c.kv_heads * ps * c.d);
    std::vector<uint16_t> v = random_bf16(k.size());
    std::vector<int32_t> positions(static_cast<size_t>(c.n));
    std::iota(positions.begin(), positions.end(), c.start);

    PagedPrefillArgs a;
    a.n = c.n;
    a.num_heads = heads;
    a.num_kv_heads = c.kv_heads;
    a.head_dim = c.d;
    a.max_position = last;
    a.scale = 1.0f / std::sqrt(float(c.d));
    std::vector<float> want_o(q.size()), want_lse(size_t(c.n) * heads);
    a.q = q.data();
    a.k_pool = k.data();
    a.v_pool = v.data();
    a.page_table = table.data();
    a.positions = positions.data();
    a.o = want_o.data();
    a.lse = want_lse.data();
    cpu::paged_prefill_attention(a);

    auto dq = to_device(q), dk = to_device(k), dv = to_device(v);
    auto dt = to_device(table), dp = to_device(positions);
    cuda::DeviceBuffer<float> o{want_o.size()}, lse{want_lse.size()};
    a.q = dq.data();
    a.k_pool = dk.data();
    a.v_pool = dv.data();
    a.page_table = dt.data();
    a.positions = dp.data();
    a.o = o.data();
    a.lse = lse.data();
    cuda::DeviceBuffer<uint8_t> ws{std::max<size_t>(1, cuda::paged_prefill_workspace_size(c.n, heads, c.kv_heads, c.d, last))};
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    expect_every_kernel_matches(a, o, lse, want_o, want_lse,
                                testing::Message() << "d " << c.d << " group " << c.group << " rows " << c.n);
  }
}

// Several sequences in one call (ReSA rectifying every sequence due in a step): each sequence's
// rows against the CPU reference run on that sequence alone. Per-row page tables as the GPU
// forward stages them; a sequence with no rows; prefixes long enough to split the keys.
TEST(CudaPagedPrefillAttention, SeveralSequencesMatchEachAlone) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  struct Seq { int start, n; };
  struct Case { int d, kv_heads, group; std::vector<Seq> seqs; };
  for (const Case& c : {Case{128, 8, 4, {{5000, 32}, {300, 17}, {0, 0}, {9000, 40}}},
                        Case{64, 3, 3, {{70, 129}, {2047, 1}, {4000, 32}}}}) {
    SCOPED_TRACE(testing::Message() << "d " << c.d << " group " << c.group);
    const int heads = c.kv_heads * c.group, ps = 16, num_seqs = int(c.seqs.size());
    int max_pos = 0, n = 0;
    for (const Seq& q : c.seqs) max_pos = std::max(max_pos, q.start + q.n - 1), n += q.n;
    const int stride = max_pos / ps + 1, pool_pages = num_seqs * stride;
    std::vector<int32_t> pool_ids(static_cast<size_t>(pool_pages));
    std::iota(pool_ids.begin(), pool_ids.end(), 0);
    std::shuffle(pool_ids.begin(), pool_ids.end(), test::rng());
    std::vector<uint16_t> q = random_bf16(size_t(n) * heads * c.d);
    std::vector<uint16_t> k = random_bf16(size_t(pool_pages) * c.kv_heads * ps * c.d), v = random_bf16(k.size());
    std::vector<int32_t> tables, positions, seq_rows = {0};
    for (int s = 0; s < num_seqs; ++s) {
      for (int r = 0; r < c.seqs[size_t(s)].n; ++r) {
        tables.insert(tables.end(), pool_ids.begin() + s * stride, pool_ids.begin() + (s + 1) * stride);
        positions.push_back(c.seqs[size_t(s)].start + r);
      }
      seq_rows.push_back(seq_rows.back() + c.seqs[size_t(s)].n);
    }
    PagedPrefillArgs a;
    a.n = n;
    a.num_heads = heads;
    a.num_kv_heads = c.kv_heads;
    a.head_dim = c.d;
    a.max_position = max_pos;
    a.scale = 1.0f / std::sqrt(float(c.d));
    std::vector<float> want_o(q.size()), want_lse(size_t(n) * heads);
    for (int s = 0; s < num_seqs; ++s) {  // each sequence alone on the CPU
      const int row0 = seq_rows[size_t(s)];
      if (c.seqs[size_t(s)].n == 0) continue;
      PagedPrefillArgs one = a;
      one.n = c.seqs[size_t(s)].n;
      one.max_position = c.seqs[size_t(s)].start + one.n - 1;
      one.q = q.data() + size_t(row0) * heads * c.d;
      one.k_pool = k.data();
      one.v_pool = v.data();
      one.page_table = pool_ids.data() + s * stride;
      one.positions = positions.data() + row0;
      one.o = want_o.data() + size_t(row0) * heads * c.d;
      one.lse = want_lse.data() + size_t(row0) * heads;
      cpu::paged_prefill_attention(one);
    }
    auto dq = to_device(q), dk = to_device(k), dv = to_device(v);
    auto dt = to_device(tables), dp = to_device(positions), ds = to_device(seq_rows);
    cuda::DeviceBuffer<float> o{want_o.size()}, lse{want_lse.size()};
    cuda::DeviceBuffer<uint8_t> ws{std::max<size_t>(1, cuda::paged_prefill_workspace_size(n, heads, c.kv_heads, c.d, max_pos))};
    a.q = dq.data();
    a.k_pool = dk.data();
    a.v_pool = dv.data();
    a.page_table = dt.data();
    a.positions = dp.data();
    a.num_seqs = num_seqs;
    a.seq_rows = ds.data();
    a.table_stride = stride;
    a.o = o.data();
    a.lse = lse.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    expect_every_kernel_matches(a, o, lse, want_o, want_lse,
                                testing::Message() << num_seqs << " sequences, d " << c.d << " group " << c.group);
  }
}

TEST(CudaPagedPrefillAttention, RejectsUnsupportedShapes) {
  PagedPrefillArgs a;
  a.n = 1;
  a.num_heads = 4;
  a.num_kv_heads = 1;
  a.head_dim = 96;
  EXPECT_EQ(cuda::paged_prefill_attention(a, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace skim
