// RetroAttention's decode-stage kernels against their CPU references (backend/cpu/retro_decode.h,
// which tests/attention/retro_decode_test.cpp holds to the definition): the plan's lists, masks
// and lengths and the masks A after the step exactly; the merge's outputs and caches within
// float rounding of expf against std::exp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../retro_plan_case.h"
#include "backend/cpu/retro_decode.h"
#include "backend/cuda/paged_decode_attention.cuh"
#include "backend/cuda/retro_decode.cuh"
#include "core/dtype.h"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

// A RetroPlanCase's inputs on the device, the masks A from the case, the outputs filled with -7
// and 0 (the plan must write what it lists); args() points a plan's arguments at them.
struct DeviceRetroPlan {
  cuda::DeviceBuffer<int32_t> page_table, lens, base_table, base_lens, slot, step, newest, a, out_table, out_lens;
  cuda::DeviceBuffer<uint32_t> base_masks, out_masks;
  cuda::DeviceBuffer<uint8_t> age, workspace;
  cuda::DeviceBuffer<unsigned long long> supplements;

  explicit DeviceRetroPlan(const test::RetroPlanCase& c)
      : page_table(to_device(c.pages.table)),
        lens(to_device(c.lens)),
        base_table(to_device(c.base_table)),
        base_lens(to_device(c.base_lens)),
        slot(to_device(c.row_slot)),
        step(to_device(c.retro_step)),
        newest(to_device(c.newest_row)),
        a(to_device(c.a)),
        out_table(to_device(std::vector<int32_t>(c.slots(), -7))),
        out_lens(to_device(std::vector<int32_t>(size_t(c.batch()) * c.kv_heads, -7))),
        base_masks(to_device(c.base_masks)),
        out_masks(to_device(std::vector<uint32_t>(c.slots(), 0u))),
        age(to_device(std::vector<uint8_t>(c.slots() * c.group, 0))),
        supplements(1) {
    cuda::check(cudaMemset(supplements.data(), 0, supplements.bytes()), "cudaMemset");
  }
  // g (its shape, units and flags) over these arrays, with a workspace for num_pool_pages.
  RetroPagePlanArgs args(RetroPagePlanArgs g, int num_pool_pages) {
    g.page_table = page_table.data();
    g.seq_lens = lens.data();
    g.base_table = base_table.data();
    g.base_lens = base_lens.data();
    g.base_masks = base_masks.data();
    g.row_slot = slot.data();
    g.retro_step = step.data();
    g.newest_row = newest.data();
    g.masks.a = a.data();
    g.age = age.data();
    g.out_table = out_table.data();
    g.out_lens = out_lens.data();
    g.out_masks = out_masks.data();
    g.supplement_tokens = supplements.data();
    g.num_pool_pages = num_pool_pages;
    workspace = cuda::DeviceBuffer<uint8_t>(cuda::retro_page_plan_workspace_size(g));
    g.workspace = workspace.data();
    g.workspace_bytes = workspace.bytes();
    return g;
  }
};

// The largest |x - y| (equal infinities count 0).
float max_diff(const std::vector<float>& x, const std::vector<float>& y) {
  float m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::isinf(x[i]) && x[i] == y[i] ? 0.0f : std::fabs(x[i] - y[i]));
  return m;
}

TEST(CudaRetroPagePlan, EqualsTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int trial = 0; trial < 6; ++trial) {
    const test::RetroPlanCase c(test::random_int(1, 3), test::random_int(1, 4), test::random_int(1, 3),
                                test::random_int(2, 5));
    const bool per_head = trial % 2 == 0;
    const int group = c.group;
    std::vector<int32_t> a_cpu = c.a, table(c.slots(), -7), lens(size_t(c.batch()) * c.kv_heads, -7);
    std::vector<uint32_t> masks(c.slots(), 0u);
    std::vector<uint8_t> age(c.slots() * group, 0);
    RetroPagePlanArgs h = c.args();
    h.per_head_units = per_head;
    h.page_table = c.pages.table.data();
    h.seq_lens = c.lens.data();
    h.base_table = c.base_table.data();
    h.base_lens = c.base_lens.data();
    h.base_masks = c.base_masks.data();
    h.row_slot = c.row_slot.data();
    h.retro_step = c.retro_step.data();
    h.newest_row = c.newest_row.data();
    h.masks = {.a = a_cpu.data(), .units = c.kv_heads * group, .stride = c.stride_pages};
    h.age = age.data();
    h.out_table = table.data();
    h.out_lens = lens.data();
    h.out_masks = masks.data();
    cpu::retro_page_plan(h);

    DeviceRetroPlan dev(c);
    const RetroPagePlanArgs g = dev.args(h, c.pages.num_pages);
    ASSERT_EQ(cuda::retro_page_plan(g, nullptr), cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "retro_page_plan");
    const auto hl = to_host(dev.out_lens), ht = to_host(dev.out_table);
    const auto hm = to_host(dev.out_masks);
    EXPECT_EQ(hl, lens) << "trial " << trial;
    EXPECT_EQ(to_host(dev.a), a_cpu) << "the masks A after the step";
    unsigned long long supplements = 0;
    for (int b = 0; b < c.batch(); ++b)
      for (int kvh = 0; kvh < c.kv_heads; ++kvh) {
        const size_t list = size_t(b) * c.kv_heads + kvh;
        if (c.row_slot[size_t(b)] >= 0 && c.newest_row[size_t(b)] != b) supplements += uint64_t(lens[list]);
        for (int k = 0; k * c.page_size < lens[list]; ++k) {
          ASSERT_EQ(ht[list * c.pages.stride + k], table[list * c.pages.stride + k]) << "row " << b << " slot " << k;
          ASSERT_EQ(hm[list * c.pages.stride + k], masks[list * c.pages.stride + k]) << "row " << b << " slot " << k;
        }
      }
    EXPECT_EQ(to_host(dev.supplements)[0], supplements);
  }
}

TEST(CudaRetroMerge, EqualsTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int d : {64, 128}) {
    const int heads = 4, w = 4, w1 = w;  // a rule's cache: w entries (RetroMergeArgs::entries_of)
    // Two sequences (slots 0 and 1): past rows of steps 4, 5, 6 and newest 7 (the oldest past
    // row's step is the newest's minus w - 1: with w - 1 entries they would share one); a past
    // row of 9 and newest 10; then a row of another policy.
    const std::vector<int32_t> slot = {0, 0, 0, 0, 1, 1, -1}, step = {4, 5, 6, 7, 9, 10, 0},
                               newest = {3, 3, 3, 3, 5, 5, 6};
    const int batch = int(slot.size());
    std::vector<float> o = test::random_vector(size_t(batch) * heads * d), lse = test::random_vector(size_t(batch) * heads);
    lse[3] = -INFINITY;  // an empty supplement
    std::vector<float> co = test::random_vector(size_t(2) * w1 * heads * d), cl = test::random_vector(size_t(2) * w1 * heads);
    // Entries step % 4: slot 0 holds 4, 5, 6 (and 3, stale); slot 1 holds 9 (8, 6, 7 stale).
    std::vector<int32_t> cs = {4, 5, 6, 3, 8, 9, 6, 7};
    std::vector<float> out(o.size()), out_lse(lse.size());
    const std::vector<RetroRowRule> rules = {RetroRowRule{.active = 1, .window = w}};
    const std::vector<int32_t> policy(size_t(batch), 0);
    std::vector<float> hco = co, hcl = cl;
    std::vector<int32_t> hcs = cs;
    cpu::retro_merge({.batch = batch, .num_heads = heads, .head_dim = d, .o = o.data(), .lse = lse.data(),
                      .out = out.data(), .out_lse = out_lse.data(), .row_slot = slot.data(), .retro_step = step.data(),
                      .newest_row = newest.data(), .rules = rules.data(), .row_policy = policy.data(),
                      .cache = {.entries = w1, .o = hco.data(), .lse = hcl.data(), .step = hcs.data()}});
    auto dO = to_device(o), dL = to_device(lse), dco = to_device(co), dcl = to_device(cl);
    auto dslot = to_device(slot), dstep = to_device(step), dnew = to_device(newest), dcs = to_device(cs);
    auto drules = to_device(rules);
    auto dpol = to_device(policy);
    cuda::DeviceBuffer<float> gout(out.size()), glse(out_lse.size());
    ASSERT_EQ(cuda::retro_merge({.batch = batch, .num_heads = heads, .head_dim = d, .o = dO.data(), .lse = dL.data(),
                                 .out = gout.data(), .out_lse = glse.data(), .row_slot = dslot.data(),
                                 .retro_step = dstep.data(), .newest_row = dnew.data(), .rules = drules.data(),
                                 .row_policy = dpol.data(),
                                 .cache = {.entries = w1, .o = dco.data(), .lse = dcl.data(), .step = dcs.data()}},
                                nullptr),
              cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "retro_merge");
    EXPECT_LT(max_diff(to_host(gout), out), 1e-5f) << "d " << d;
    EXPECT_LT(max_diff(to_host(glse), out_lse), 1e-5f) << "d " << d;
    EXPECT_LT(max_diff(to_host(dco), hco), 1e-5f) << "d " << d;
    EXPECT_EQ(to_host(dcs), hcs);
  }
}

// A folded step (RetroPagePlanArgs::folded_q: each past row attends as more query heads of its
// newest row's lists) against the same step unfolded (the past rows' own lists), plan, kernel and
// merge: the outputs and caches within float rounding (the kernel splits other lists over its
// CTAs), the masks A and the supplements' tokens exactly. Both also with the merge run by the
// attention call (its Retro form: in the chunk merge's launch where it splits the lists, which
// lists of up to 1500 tokens mostly do).
TEST(CudaRetroFold, EqualsTheUnfoldedStep) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int trial = 0; trial < 6; ++trial) {
    const int d = trial % 2 ? 64 : 128;
    const test::RetroPlanCase c(test::random_int(1, 3), test::random_int(1, 4), test::random_int(1, 3), 2);
    const int batch = c.batch(), kvh = c.kv_heads, group = c.group, heads = kvh * group;
    const int sequences = (batch - 1) / 2;
    ASSERT_TRUE(retro_fold_fits(2, group));
    std::vector<uint16_t> q(size_t(batch) * heads * d), kv(size_t(c.pages.num_pages) * kvh * c.page_size * d * 2);
    const std::vector<float> qf = test::random_vector(q.size()), kvf = test::random_vector(kv.size());
    std::transform(qf.begin(), qf.end(), q.begin(), f32_to_bf16);
    std::transform(kvf.begin(), kvf.end(), kv.begin(), f32_to_bf16);
    const bool per_head = trial % 4 < 2, sparse = trial % 3 != 2;  // quest's units or gbsa's; a dense layer
    const std::vector<RetroRowRule> rules = {RetroRowRule{.active = 1, .window = 2}};
    const std::vector<int32_t> policy(size_t(batch), 0);
    // Entries step % 2 of each slot: the past row's step cached in some, stale in others.
    std::vector<int32_t> tags(size_t(sequences) * 2);
    for (int sq = 0; sq < sequences; ++sq)
      for (int e = 0; e < 2; ++e) {
        const int past_step = c.retro_step[size_t(2 * sq)];
        tags[size_t(sq) * 2 + e] = past_step % 2 == e && test::random_int(0, 3) > 0 ? past_step : past_step - 2;
      }
    const std::vector<float> cache_o = test::random_vector(size_t(sequences) * 2 * heads * d),
                             cache_lse = test::random_vector(size_t(sequences) * 2 * heads);
    auto dq = to_device(q), dkv = to_device(kv);
    auto drules = to_device(rules);
    auto dpol = to_device(policy);
    struct Run {
      std::vector<float> out, out_lse, cache_o, cache_lse;
      std::vector<int32_t> a;
      unsigned long long supplements;
    };
    auto run = [&](bool fold, bool merge_in_call) {
      DeviceRetroPlan dev(c);
      auto dtags = to_device(tags);
      auto dco = to_device(cache_o), dcl = to_device(cache_lse);
      cuda::DeviceBuffer<uint16_t> folded_q(size_t(batch) * 2 * heads * d);
      cuda::DeviceBuffer<float> o(size_t(batch) * 2 * heads * d), lse(size_t(batch) * 2 * heads);
      cuda::DeviceBuffer<float> out(size_t(batch) * heads * d), out_lse(size_t(batch) * heads);
      RetroPagePlanArgs g = c.args();
      g.per_head_units = per_head;
      g.sparse = sparse;
      g.masks = {.a = nullptr, .units = heads, .stride = c.stride_pages};
      g.q = dq.data();
      g.folded_q = fold ? folded_q.data() : nullptr;
      g.head_dim = d;
      g = dev.args(g, c.pages.num_pages);
      EXPECT_EQ(cuda::retro_page_plan(g, nullptr), cudaSuccess);
      PagedDecodeArgs a{.batch = batch, .num_heads = fold ? 2 * heads : heads, .num_kv_heads = kvh, .head_dim = d,
                        .max_pages_per_seq = c.pages.stride,
                        .max_seq_len = *std::max_element(c.lens.begin(), c.lens.end()),
                        .scale = 1.0f / std::sqrt(float(d)), .tables_per_kv_head = true,
                        .q = fold ? folded_q.data() : dq.data(), .k_pool = dkv.data(),
                        .v_pool = dkv.data() + kv.size() / 2, .page_table = dev.out_table.data(),
                        .seq_lens = dev.out_lens.data(), .head_masks = dev.out_masks.data(), .o = o.data(),
                        .lse = lse.data()};
      cuda::DeviceBuffer<uint8_t> attn_ws(std::max<size_t>(1, cuda::paged_decode_workspace_size(a)));
      cuda::check(cudaMemset(attn_ws.data(), 0, attn_ws.bytes()), "cudaMemset");
      a.workspace = attn_ws.data();
      a.workspace_bytes = attn_ws.bytes();
      const RetroMergeArgs merge{
          .batch = batch, .num_heads = heads, .head_dim = d, .o = o.data(), .lse = lse.data(), .out = out.data(),
          .out_lse = out_lse.data(), .row_slot = dev.slot.data(), .retro_step = dev.step.data(),
          .newest_row = dev.newest.data(), .rules = drules.data(), .row_policy = dpol.data(),
          .cache = {.entries = 2, .o = dco.data(), .lse = dcl.data(), .step = dtags.data()},
          .fold_group = fold ? group : 0};
      if (merge_in_call) {
        EXPECT_EQ(cuda::paged_decode_attention(a, merge, nullptr), cudaSuccess);
      } else {
        EXPECT_EQ(cuda::paged_decode_attention(a, nullptr), cudaSuccess);
        EXPECT_EQ(cuda::retro_merge(merge, nullptr), cudaSuccess);
      }
      cuda::check(cudaDeviceSynchronize(), "retro step");
      return Run{to_host(out), to_host(out_lse), to_host(dco), to_host(dcl), to_host(dev.a), to_host(dev.supplements)[0]};
    };
    const Run plain = run(false, false);
    const std::string at = "trial " + std::to_string(trial) + ", d " + std::to_string(d) + ", group " +
                           std::to_string(group) + ", kv heads " + std::to_string(kvh) +
                           (per_head ? ", a unit a head" : ", a unit a group") + (sparse ? "" : ", dense layer");
    for (const auto& [fold, merge_in_call] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      const Run other = run(fold, merge_in_call);
      const std::string how = at + (fold ? ", folded" : "") + (merge_in_call ? ", merged in the call" : "");
      EXPECT_LT(max_diff(other.out, plain.out), 2e-5f) << how;
      EXPECT_LT(max_diff(other.out_lse, plain.out_lse), 2e-5f) << how;
      EXPECT_LT(max_diff(other.cache_o, plain.cache_o), 2e-5f) << how;
      EXPECT_LT(max_diff(other.cache_lse, plain.cache_lse), 2e-5f) << how;
      EXPECT_EQ(other.a, plain.a) << how;
      EXPECT_EQ(other.supplements, plain.supplements) << how;
    }
    if (sparse) {
      EXPECT_GT(plain.supplements, 0u) << at << ": no past row attended a page";
    }
  }
}

}  // namespace
}  // namespace skim
