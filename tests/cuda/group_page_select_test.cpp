// CUDA group page selection against its CPU reference on fresh random inputs, and the two
// kernels it feeds composed: selection then decode attention over each (sequence, KV head)'s
// kept pages, against the CPU reference of both. The bound is summed in another order on the
// GPU, so near-equal scores at the threshold may swap: every page the two choices disagree
// on must score within rounding of the threshold. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "../shuffled_pages.h"
#include "../test_random.h"
#include "backend/cpu/group_page_select.h"
#include "backend/cpu/paged_decode_attention.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/group_page_select.cuh"
#include "backend/cuda/paged_decode_attention.cuh"
#include "core/dtype.h"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

struct Case {
  int d, kv_heads, group;
  std::vector<int> lens;
  double keep;
  int n_min, n_local;
  // Every bound positive and of similar size (keys sharing their sign and exponent bits, so the
  // radix passes resolve on the mantissa), the local pages' forced keys above them.
  bool positive = false;
};

TEST(CudaGroupPageSelect, MatchesCpuReferenceAndFeedsDecodeAttention) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : {Case{128, 8, 4, {8192, 100, 0, 3001}, 0.1, 16, 1}, Case{64, 2, 4, {1, 15, 17, 256}, 0.1, 16, 1},
                        Case{128, 1, 8, {33000}, 0.05, 4, 3}, Case{64, 3, 1, {2049, 700, 33}, 0.3, 1, 0},
                        Case{128, 2, 12, {5000, 7}, 0.02, 2, 70}, Case{128, 2, 4, {1600}, 1.0, 16, 1},
                        Case{128, 2, 4, {32768, 4000, 257}, 0.1, 16, 8, true}}) {
    SCOPED_TRACE(testing::Message() << "d " << c.d << " kv " << c.kv_heads << " group " << c.group << " keep "
                                    << c.keep << " n_min " << c.n_min << " n_local " << c.n_local << " positive "
                                    << c.positive);
    auto& rng = test::rng();
    const int ps = 16, d = c.d, hkv = c.kv_heads, heads = hkv * c.group, batch = int(c.lens.size());
    const test::ShuffledPages pages = test::shuffled_pages(c.lens, ps, 3, 2, rng);
    // bf16 digests (min <= max), as the GPU cache holds them.
    std::vector<uint16_t> kmin(size_t(pages.num_pages) * hkv * d), kmax(kmin.size());
    {
      const std::vector<float> lo = test::random_vector(kmin.size()), gap = test::random_vector(kmin.size());
      for (size_t i = 0; i < kmin.size(); ++i) {
        const float l = c.positive ? 0.5f + std::fabs(lo[i]) : lo[i];
        kmin[i] = f32_to_bf16(l);
        kmax[i] = f32_to_bf16(l + std::fabs(gap[i]));
      }
    }
    std::vector<uint16_t> q(size_t(batch) * heads * d), kp(size_t(pages.num_pages) * hkv * ps * d), vp(kp.size());
    for (auto* buf : {&q, &kp, &vp}) {
      const std::vector<float> f = test::random_vector(buf->size());
      const bool pos = c.positive && buf == &q;
      std::transform(f.begin(), f.end(), buf->begin(), [&](float x) { return f32_to_bf16(pos ? std::fabs(x) : x); });
    }

    GroupPageSelectArgs a;
    a.batch = batch;
    a.num_heads = heads;
    a.num_kv_heads = hkv;
    a.head_dim = d;
    a.max_pages_per_seq = pages.stride;
    a.keep = c.keep;
    a.n_min = c.n_min;
    a.n_local = c.n_local;
    const size_t lists = size_t(batch) * hkv;
    std::vector<int32_t> ref_table(lists * pages.stride, -1), ref_lens(lists, -1);
    {
      GroupPageSelectArgs h = a;
      h.q = q.data();
      h.kmin = kmin.data();
      h.kmax = kmax.data();
      h.page_table = pages.table.data();
      h.seq_lens = c.lens.data();
      h.out_table = ref_table.data();
      h.out_lens = ref_lens.data();
      std::vector<float> scores;
      cpu::group_page_select(h, &scores);

      auto dq = to_device(q);
      auto dmin = to_device(kmin), dmax = to_device(kmax);
      auto dtable = to_device(pages.table);
      auto dlens = to_device(c.lens);
      cuda::DeviceBuffer<int32_t> out_table(lists * pages.stride), out_lens(lists);
      cuda::check(cudaMemset(out_table.data(), 0xff, out_table.bytes()), "cudaMemset");
      cuda::DeviceBuffer<uint8_t> ws(cuda::group_page_select_workspace_size(a));
      // The workspace holds garbage: the kernels must not depend on its contents.
      cuda::check(cudaMemset(ws.data(), 0x5a, ws.bytes()), "cudaMemset");
      a.q = dq.data();
      a.kmin = dmin.data();
      a.kmax = dmax.data();
      a.page_table = dtable.data();
      a.seq_lens = dlens.data();
      a.out_table = out_table.data();
      a.out_lens = out_lens.data();
      a.workspace = ws.data();
      a.workspace_bytes = ws.bytes();
      ASSERT_EQ(cuda::group_page_select(a, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<int32_t> gpu_table = to_host(out_table), gpu_lens = to_host(out_lens);

      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < hkv; ++h) {
          SCOPED_TRACE(testing::Message() << "sequence " << b << " KV head " << h);
          const size_t list = size_t(b) * hkv + h;
          ASSERT_EQ(gpu_lens[list], ref_lens[list]);
          const int m = pages.pages_of(c.lens[b], ps), n = a.pages_kept(m);
          auto position = [&](int32_t id) {
            const int32_t* row = pages.table.data() + size_t(b) * pages.stride;
            return int(std::find(row, row + m, id) - row);
          };
          std::vector<int> gpu_pos;
          std::set<int> ref_pos;
          for (int i = 0; i < n; ++i) {
            gpu_pos.push_back(position(gpu_table[list * pages.stride + i]));
            ref_pos.insert(position(ref_table[list * pages.stride + i]));
          }
          if (m > 0) {
            EXPECT_EQ(gpu_table[list * pages.stride + n], -1) << "more than n pages listed";
          }
          ASSERT_TRUE(std::is_sorted(gpu_pos.begin(), gpu_pos.end())) << "not in position order";
          ASSERT_EQ(std::set<int>(gpu_pos.begin(), gpu_pos.end()).size(), gpu_pos.size()) << "a page twice";
          if (m == 0) continue;
          EXPECT_EQ(gpu_pos.back(), m - 1) << "the newest page is not last";
          ASSERT_LT(gpu_pos.back(), m) << "a page id not the sequence's";
          // Pages chosen by one side only: each must score within rounding of the threshold.
          std::vector<float> s(scores.begin() + list * pages.stride, scores.begin() + list * pages.stride + m);
          std::vector<float> sorted = s;
          std::sort(sorted.begin(), sorted.end(), std::greater<>());
          const float threshold = sorted[n - 1];
          const double tol = 1e-4 * (1 + std::fabs(threshold));
          for (int p : gpu_pos) {
            if (!ref_pos.count(p)) {
              EXPECT_NEAR(s[p], threshold, tol) << "GPU kept page " << p;
            }
          }
          for (int p : ref_pos) {
            const bool kept = std::find(gpu_pos.begin(), gpu_pos.end(), p) != gpu_pos.end();
            if (!kept) {
              EXPECT_NEAR(s[p], threshold, tol) << "GPU dropped page " << p;
            }
          }
        }

      // Composition: the GPU's lists through the GPU decode kernel and through its CPU reference.
      PagedDecodeArgs da;
      da.batch = batch;
      da.num_heads = heads;
      da.num_kv_heads = hkv;
      da.head_dim = d;
      da.max_pages_per_seq = pages.stride;
      da.max_seq_len = a.pages_kept(pages.stride) * ps;
      da.scale = 1.0f / std::sqrt(float(d));
      da.tables_per_kv_head = true;
      std::vector<int32_t> lists_table = gpu_table;
      for (auto& id : lists_table) id = id < 0 ? 0 : id;  // slots past a list are never read
      std::vector<float> o_ref(size_t(batch) * heads * d), lse_ref(size_t(batch) * heads);
      {
        PagedDecodeArgs hd = da;
        hd.q = q.data();
        hd.k_pool = kp.data();
        hd.v_pool = vp.data();
        hd.page_table = lists_table.data();
        hd.seq_lens = gpu_lens.data();
        hd.o = o_ref.data();
        hd.lse = lse_ref.data();
        cpu::paged_decode_attention(hd);
      }
      auto dk = to_device(kp), dv = to_device(vp);
      cuda::DeviceBuffer<float> o(o_ref.size()), lse(lse_ref.size());
      cuda::DeviceBuffer<uint8_t> dws(std::max<size_t>(cuda::paged_decode_workspace_size(da), 1));
      cuda::check(cudaMemset(dws.data(), 0, dws.bytes()), "cudaMemset");
      da.q = dq.data();
      da.k_pool = dk.data();
      da.v_pool = dv.data();
      da.page_table = out_table.data();
      da.seq_lens = out_lens.data();
      da.o = o.data();
      da.lse = lse.data();
      da.workspace = dws.data();
      da.workspace_bytes = dws.bytes();
      ASSERT_EQ(cuda::paged_decode_attention(da, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> o_gpu = to_host(o), lse_gpu = to_host(lse);
      double max_ref = 0, max_diff = 0;
      for (size_t i = 0; i < o_ref.size(); ++i) {
        max_ref = std::max(max_ref, double(std::fabs(o_ref[i])));
        max_diff = std::max(max_diff, double(std::fabs(o_gpu[i] - o_ref[i])));
      }
      EXPECT_LT(max_diff, 2e-3 * max_ref) << "decode attention over the kept pages";
      for (size_t i = 0; i < lse_ref.size(); ++i) {
        if (std::isfinite(lse_ref[i])) {
          EXPECT_NEAR(lse_gpu[i], lse_ref[i], 1e-3) << "lse " << i;
        }
      }
    }
  }
}

// by_score: the kept pages in descending bound order, the newest first (ART's visiting order).
// Against the CPU reference's scores: the list starts with the newest page, the forced pages
// follow it, and the bounds along the list never rise by more than rounding (the GPU sums them
// in another order, so near-ties may swap); the set kept is checked above.
TEST(CudaGroupPageSelect, ByScoreListsDescendingBounds) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : {Case{128, 8, 4, {8192, 100, 0, 3001}, 0.1, 16, 1}, Case{64, 3, 1, {2049, 700, 33}, 1.0, 1, 2},
                        Case{128, 2, 4, {33000}, 1.0, 1, 1}}) {
    SCOPED_TRACE(testing::Message() << "d " << c.d << " kv " << c.kv_heads << " keep " << c.keep);
    auto& rng = test::rng();
    const int ps = 16, d = c.d, hkv = c.kv_heads, heads = hkv * c.group, batch = int(c.lens.size());
    const test::ShuffledPages pages = test::shuffled_pages(c.lens, ps, 3, 2, rng);
    std::vector<uint16_t> kmin(size_t(pages.num_pages) * hkv * d), kmax(kmin.size()), q(size_t(batch) * heads * d);
    const std::vector<float> lo = test::random_vector(kmin.size()), gap = test::random_vector(kmin.size());
    for (size_t i = 0; i < kmin.size(); ++i) {
      kmin[i] = f32_to_bf16(lo[i]);
      kmax[i] = f32_to_bf16(lo[i] + std::fabs(gap[i]));
    }
    const std::vector<float> qf = test::random_vector(q.size());
    std::transform(qf.begin(), qf.end(), q.begin(), f32_to_bf16);
    GroupPageSelectArgs a{.batch = batch, .num_heads = heads, .num_kv_heads = hkv, .head_dim = d,
                          .max_pages_per_seq = pages.stride, .keep = c.keep, .n_min = c.n_min, .n_local = c.n_local,
                          .by_score = true};
    const size_t lists = size_t(batch) * hkv;
    std::vector<int32_t> ref_table(lists * pages.stride, -1), ref_lens(lists, -1);
    std::vector<float> scores;
    GroupPageSelectArgs h = a;
    h.q = q.data();
    h.kmin = kmin.data();
    h.kmax = kmax.data();
    h.page_table = pages.table.data();
    h.seq_lens = c.lens.data();
    h.out_table = ref_table.data();
    h.out_lens = ref_lens.data();
    cpu::group_page_select(h, &scores);

    auto dq = to_device(q), dmin = to_device(kmin), dmax = to_device(kmax);
    auto dtable = to_device(pages.table), dlens = to_device(c.lens);
    cuda::DeviceBuffer<int32_t> out_table(lists * pages.stride), out_lens(lists);
    cuda::check(cudaMemset(out_table.data(), 0xff, out_table.bytes()), "cudaMemset");
    cuda::DeviceBuffer<uint8_t> ws(cuda::group_page_select_workspace_size(a));
    cuda::check(cudaMemset(ws.data(), 0x5a, ws.bytes()), "cudaMemset");
    a.q = dq.data();
    a.kmin = dmin.data();
    a.kmax = dmax.data();
    a.page_table = dtable.data();
    a.seq_lens = dlens.data();
    a.out_table = out_table.data();
    a.out_lens = out_lens.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    for (int run = 0; run < 2; ++run) ASSERT_EQ(cuda::group_page_select(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int32_t> gpu_table = to_host(out_table), gpu_lens = to_host(out_lens);
    int swapped = 0;
    for (int b = 0; b < batch; ++b)
      for (int kh = 0; kh < hkv; ++kh) {
        const size_t list = size_t(b) * hkv + kh;
        ASSERT_EQ(gpu_lens[list], ref_lens[list]);
        const int m = pages.pages_of(c.lens[b], ps), n = a.pages_kept(m);
        if (m == 0) continue;
        const int32_t* row = pages.table.data() + size_t(b) * pages.stride;
        std::vector<int> pos;
        for (int i = 0; i < n; ++i)
          pos.push_back(int(std::find(row, row + m, gpu_table[list * pages.stride + i]) - row));
        ASSERT_EQ(pos[0], m - 1) << "the newest page first";
        const int forced = std::min(c.n_local, m);
        for (int i = 1; i < forced; ++i) EXPECT_EQ(pos[size_t(i)], m - 1 - forced + i) << "the forced pages next";
        const float* s = scores.data() + list * pages.stride;
        for (int i = forced + 1; i < n; ++i) {
          const float prev = s[pos[size_t(i - 1)]], cur = s[pos[size_t(i)]];
          EXPECT_LE(cur, prev + 1e-4f * (1 + std::fabs(prev))) << "bounds rise at " << i;
          swapped += cur > prev;
        }
        EXPECT_EQ(std::set<int>(pos.begin(), pos.end()).size(), pos.size()) << "a page twice";
      }
    std::printf("[ by_score ] d %d kv %d keep %g: %d near-tie swaps against the CPU's order\n", d, hkv, c.keep,
                swapped);
  }
}

}  // namespace
}  // namespace skim
