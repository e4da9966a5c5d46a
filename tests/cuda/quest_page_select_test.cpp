// cuda::quest_page_select against Quest's definition (tests/quest_plan_check.h, the check the
// CPU reference passes too) on fresh random bf16 inputs, and against the CPU reference: the
// lists may differ only where the GPU's float sums order a near-tie differently, so the count
// of (sequence, query head) choices that differ is reported and must stay small.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "../quest_plan_check.h"
#include "../shuffled_pages.h"
#include "../test_random.h"
#include "attention/quest_page_select_args.h"
#include "backend/cpu/quest_page_select.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/quest_page_select.cuh"
#include "core/dtype.h"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

struct Case {
  int d, kv_heads, group;
  std::vector<int> lens;
  double budget;
  int min_tokens;
  // Every bound positive and of similar size: keys sharing their sign and exponent bits, so the
  // radix passes resolve on the mantissa.
  bool positive = false;
};

TEST(CudaQuestPageSelect, KeepsEachHeadsBestPagesAsTheCpuReferenceDoes) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : {Case{128, 8, 4, {8192, 100, 0, 3001}, 0.1, 0}, Case{64, 2, 4, {1, 15, 17, 256}, 0.2, 0},
                        Case{128, 1, 8, {33000}, 0.05, 0}, Case{64, 3, 3, {2049, 700, 33}, 0.2, 64},
                        Case{128, 2, 12, {5000, 7}, 96.0, 0}, Case{128, 2, 4, {1600}, 1.0, 0},
                        Case{64, 1, 32, {170000}, 0.02, 0},
                        // More select CTAs than an H100 or H200 has SMs: the 2-CTAs-an-SM select.
                        Case{64, 8, 4, {4100, 999, 2048, 16, 3000}, 0.1, 0},
                        Case{128, 2, 4, {32768, 4000, 257}, 0.1, 0, true}}) {
    SCOPED_TRACE(testing::Message() << "d " << c.d << " kv " << c.kv_heads << " group " << c.group << " budget "
                                    << c.budget << " min " << c.min_tokens << " positive " << c.positive);
    auto& rng = test::rng();
    const int ps = 16, d = c.d, hkv = c.kv_heads, heads = hkv * c.group, batch = int(c.lens.size());
    const test::ShuffledPages pages = test::shuffled_pages(c.lens, ps, 3, 2, rng);
    std::vector<uint16_t> kmin(size_t(pages.num_pages) * hkv * d), kmax(kmin.size()), q(size_t(batch) * heads * d);
    {
      const std::vector<float> lo = test::random_vector(kmin.size()), gap = test::random_vector(kmin.size());
      for (size_t i = 0; i < kmin.size(); ++i) {
        const float l = c.positive ? 0.5f + std::fabs(lo[i]) : lo[i];
        kmin[i] = f32_to_bf16(l);
        kmax[i] = f32_to_bf16(l + std::fabs(gap[i]));
      }
      const std::vector<float> f = test::random_vector(q.size());
      std::transform(f.begin(), f.end(), q.begin(), [&](float x) { return f32_to_bf16(c.positive ? std::fabs(x) : x); });
    }
    const size_t slots = size_t(batch) * hkv * pages.stride;
    QuestPageSelectArgs a{.batch = batch, .num_heads = heads, .num_kv_heads = hkv, .head_dim = d, .page_size = ps,
                          .max_pages_per_seq = pages.stride, .budget = c.budget, .min_tokens = c.min_tokens};

    // CPU reference.
    std::vector<int32_t> ref_table(slots, -1), ref_lens(size_t(batch) * hkv, -1);
    std::vector<uint32_t> ref_masks(slots, 0u);
    QuestPageSelectArgs h = a;
    h.q = q.data();
    h.kmin = kmin.data();
    h.kmax = kmax.data();
    h.page_table = pages.table.data();
    h.seq_lens = c.lens.data();
    h.out_table = ref_table.data();
    h.out_masks = ref_masks.data();
    h.out_lens = ref_lens.data();
    cpu::quest_page_select(h);

    // GPU (outputs and workspace poisoned).
    auto dq = test::to_device(q), dmin = test::to_device(kmin), dmax = test::to_device(kmax);
    auto dtable = test::to_device(pages.table), dlens = test::to_device(c.lens);
    auto out_table = test::to_device(std::vector<int32_t>(slots, -1));
    auto out_masks = test::to_device(std::vector<uint32_t>(slots, 0xdeadbeefu));
    auto out_lens = test::to_device(std::vector<int32_t>(size_t(batch) * hkv, -1));
    a.q = dq.data();
    a.kmin = dmin.data();
    a.kmax = dmax.data();
    a.page_table = dtable.data();
    a.seq_lens = dlens.data();
    a.out_table = out_table.data();
    a.out_masks = out_masks.data();
    a.out_lens = out_lens.data();
    auto listed = test::to_device(std::vector<unsigned long long>{0});
    a.listed_tokens = listed.data();
    cuda::DeviceBuffer<uint8_t> ws(std::max<size_t>(cuda::quest_page_select_workspace_size(a), 1));
    ASSERT_EQ(cudaMemset(ws.data(), 0xab, ws.bytes()), cudaSuccess);
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    ASSERT_EQ(cuda::quest_page_select(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int32_t> table = test::to_host(out_table), lens = test::to_host(out_lens);
    const std::vector<uint32_t> masks = test::to_host(out_masks);

    test::check_quest_plan(h, pages.table, table, masks, lens);
    unsigned long long want_listed = 0;
    for (int32_t n : lens) want_listed += (unsigned long long)n;
    EXPECT_EQ(test::to_host(listed)[0], want_listed) << "the device count of the lists' tokens";
    // Against the reference: the (sequence, KV head) lists that differ at all.
    int differ = 0;
    for (int l = 0; l < batch * hkv; ++l) {
      bool same = lens[size_t(l)] == ref_lens[size_t(l)];
      for (int i = 0; same && i < (lens[size_t(l)] + ps - 1) / ps; ++i) {
        const size_t k = size_t(l) * pages.stride + i;
        same = table[k] == ref_table[k] && masks[k] == ref_masks[k];
      }
      differ += !same;
    }
    std::printf("[ quest    ] d %d kv %d group %d: %d of %d lists differ from the CPU reference (near-ties)\n", d,
                hkv, c.group, differ, batch * hkv);
    EXPECT_LE(differ, std::max(1, batch * hkv / 4));

    // by_score (ART's visiting order): the same pages and masks as the position-order plan of
    // this kernel, the newest page first, then descending best bound (recomputed in double;
    // near-ties may swap).
    QuestPageSelectArgs bs = a;
    bs.by_score = true;
    bs.listed_tokens = nullptr;
    cuda::DeviceBuffer<uint8_t> bws(cuda::quest_page_select_workspace_size(bs));
    bs.workspace = bws.data();
    bs.workspace_bytes = bws.bytes();
    auto bt = test::to_device(std::vector<int32_t>(slots, -1));
    auto bm = test::to_device(std::vector<uint32_t>(slots, 0xdeadbeefu));
    auto bl = test::to_device(std::vector<int32_t>(size_t(batch) * hkv, -1));
    bs.out_table = bt.data();
    bs.out_masks = bm.data();
    bs.out_lens = bl.data();
    ASSERT_EQ(cuda::quest_page_select(bs, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int32_t> by_table = test::to_host(bt), by_lens = test::to_host(bl);
    const std::vector<uint32_t> by_masks = test::to_host(bm);
    EXPECT_EQ(by_lens, lens);
    int misordered = 0;
    for (int b = 0; b < batch; ++b)
      for (int kvh = 0; kvh < hkv; ++kvh) {
        const size_t list = size_t(b) * hkv + kvh, at = list * pages.stride;
        const int n = (lens[list] + ps - 1) / ps, m = (c.lens[size_t(b)] + ps - 1) / ps;
        if (n == 0) continue;
        EXPECT_EQ(by_table[at], pages.table[size_t(b) * pages.stride + m - 1]) << "the newest page first";
        std::vector<std::pair<int32_t, uint32_t>> x, y;
        double prev = INFINITY;
        for (int i = 0; i < n; ++i) {
          x.push_back({table[at + i], masks[at + i]});
          y.push_back({by_table[at + i], by_masks[at + i]});
          if (i == 0) continue;
          double best = -INFINITY;
          for (int g = 0; g < c.group; ++g) {
            if (!(by_masks[at + i] >> g & 1u)) continue;
            const size_t off = (size_t(by_table[at + i]) * hkv + kvh) * d, qo = (size_t(b) * heads + kvh * c.group + g) * d;
            double sb = 0;
            for (int k = 0; k < d; ++k) {
              const double qk = bf16_to_f32(q[qo + k]);
              sb += std::max(qk * bf16_to_f32(kmin[off + k]), qk * bf16_to_f32(kmax[off + k]));
            }
            best = std::max(best, sb);
          }
          misordered += best > prev + 1e-3 * std::max(1.0, std::fabs(prev));
          prev = best;
        }
        std::sort(x.begin(), x.end());
        std::sort(y.begin(), y.end());
        EXPECT_EQ(x, y) << "list " << list << ": the same pages and masks";
      }
    EXPECT_EQ(misordered, 0) << "pages out of descending best bound";
  }
}

}  // namespace
}  // namespace skim
