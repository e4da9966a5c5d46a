// A plan mixing policies on the GPU (the composition tests/attention/mixed_plan_test.cpp holds
// the CPU kernels to): window_page_plan (dense and streaming rows), group_page_select and
// quest_page_select each plan the rows of their policy into one set of device buffers. The
// dense and streaming rows equal the CPU reference exactly; each selection's rows equal the
// same kernel's plan of the whole batch bit for bit (rows are planned independently); gbsa
// marks its pages for every head.
#include <gtest/gtest.h>

#include <type_traits>

#include "../mixed_plan_case.h"
#include "backend/cpu/window_page_plan.h"
#include "backend/cuda/window_page_plan.cuh"
#include "backend/cuda/group_page_select.cuh"
#include "backend/cuda/quest_page_select.cuh"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::MixedPlanCase;

struct DevicePlan {
  cuda::DeviceBuffer<int32_t> table, lens;
  cuda::DeviceBuffer<uint32_t> masks;
  explicit DevicePlan(const MixedPlanCase& c)
      : table(test::to_device(std::vector<int32_t>(c.slots(), -7))),
        lens(test::to_device(std::vector<int32_t>(c.lists(), -7))),
        masks(test::to_device(std::vector<uint32_t>(c.slots(), 0xdeadbeefu))) {}
};

struct DeviceInputs {
  cuda::DeviceBuffer<uint16_t> q, kmin, kmax;
  cuda::DeviceBuffer<int32_t> table, lens, row_policy;
  explicit DeviceInputs(const MixedPlanCase& c)
      : q(test::to_device(c.q)), kmin(test::to_device(c.kmin)), kmax(test::to_device(c.kmax)),
        table(test::to_device(c.pages.table)), lens(test::to_device(c.lens)),
        row_policy(test::to_device(std::vector<int32_t>(c.row_policy.begin(), c.row_policy.end()))) {}
};

template <class Args>
void point(const DeviceInputs& in, DevicePlan& p, Args& a) {
  a.page_table = in.table.data();
  a.seq_lens = in.lens.data();
  a.out_table = p.table.data();
  a.out_lens = p.lens.data();
  a.out_masks = p.masks.data();
  if constexpr (!std::is_same_v<Args, WindowPagePlanArgs>) {
    a.q = in.q.data();
    a.kmin = in.kmin.data();
    a.kmax = in.kmax.data();
  }
}

TEST(CudaMixedPlan, EachRowIsPlannedByItsOwnPolicy) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int trial = 0; trial < 4; ++trial) {
    const MixedPlanCase c(trial % 2 ? 64 : 128, 4, 4,
                          {test::random_int(1, 5000), test::random_int(1, 900), 33000, 17, 1, 2500, 800, 4096});
    const DeviceInputs in(c);
    DevicePlan mixed(c), gbsa(c), quest(c);
    auto only = [&](int policy) { return PlanRows{in.row_policy.data(), 1u << policy}; };
    cuda::DeviceBuffer<uint8_t> ws;
    auto workspace = [&](auto& a, size_t need) {
      if (ws.bytes() < need) ws.resize(need);
      a.workspace = ws.data();
      a.workspace_bytes = ws.bytes();
    };

    WindowPagePlanArgs d = c.dense();
    point(in, mixed, d);
    d.rows = only(MixedPlanCase::kDense);
    ASSERT_EQ(cuda::window_page_plan(d, nullptr), cudaSuccess);
    WindowPagePlanArgs w = c.streaming();
    point(in, mixed, w);
    w.rows = only(MixedPlanCase::kStreaming);
    ASSERT_EQ(cuda::window_page_plan(w, nullptr), cudaSuccess);
    GroupPageSelectArgs g = c.gbsa();
    point(in, mixed, g);
    g.rows = only(MixedPlanCase::kGbsa);
    workspace(g, cuda::group_page_select_workspace_size(g));
    ASSERT_EQ(cuda::group_page_select(g, nullptr), cudaSuccess);
    QuestPageSelectArgs q = c.quest();
    point(in, mixed, q);
    q.rows = only(MixedPlanCase::kQuest);
    workspace(q, cuda::quest_page_select_workspace_size(q));
    ASSERT_EQ(cuda::quest_page_select(q, nullptr), cudaSuccess);

    GroupPageSelectArgs g_all = c.gbsa();  // every row, no masks
    point(in, gbsa, g_all);
    g_all.out_masks = nullptr;
    workspace(g_all, cuda::group_page_select_workspace_size(g_all));
    ASSERT_EQ(cuda::group_page_select(g_all, nullptr), cudaSuccess);
    QuestPageSelectArgs q_all = c.quest();
    point(in, quest, q_all);
    workspace(q_all, cuda::quest_page_select_workspace_size(q_all));
    ASSERT_EQ(cuda::quest_page_select(q_all, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    // The dense rows against the CPU reference.
    std::vector<int32_t> ref_table(c.slots(), -7), ref_lens(c.lists(), -7);
    WindowPagePlanArgs h = c.dense();
    h.page_table = c.pages.table.data();
    h.seq_lens = c.lens.data();
    h.out_table = ref_table.data();
    h.out_lens = ref_lens.data();
    cpu::window_page_plan(h);

    std::vector<int32_t> win_table(c.slots(), -7), win_lens(c.lists(), -7);
    WindowPagePlanArgs hw = c.streaming();
    hw.page_table = c.pages.table.data();
    hw.seq_lens = c.lens.data();
    hw.out_table = win_table.data();
    hw.out_lens = win_lens.data();
    cpu::window_page_plan(hw);

    const auto table = test::to_host(mixed.table), lens = test::to_host(mixed.lens);
    const auto masks = test::to_host(mixed.masks);
    const auto quest_masks = test::to_host(quest.masks);
    EXPECT_EQ(test::compare_rows(c, MixedPlanCase::kDense, table, masks, lens, ref_table, nullptr, ref_lens), "");
    EXPECT_EQ(test::compare_rows(c, MixedPlanCase::kStreaming, table, masks, lens, win_table, nullptr, win_lens), "");
    EXPECT_EQ(test::compare_rows(c, MixedPlanCase::kGbsa, table, masks, lens, test::to_host(gbsa.table), nullptr,
                                 test::to_host(gbsa.lens)), "");
    EXPECT_EQ(test::compare_rows(c, MixedPlanCase::kQuest, table, masks, lens, test::to_host(quest.table),
                                 &quest_masks, test::to_host(quest.lens)), "");
    for (size_t l = 0; l < c.lists(); ++l) EXPECT_NE(lens[l], -7) << "list " << l << " planned by no policy";
  }
}

// The window plan in ART's visiting order (recent_first) equals the CPU reference exactly.
TEST(CudaWindowPagePlan, RecentFirstEqualsTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const MixedPlanCase c(64, 2, 3, {test::random_int(1, 900), 17, 1, 2500, test::random_int(1, 5000)});
  WindowPagePlanArgs h = c.streaming();
  h.recent_first = true;
  std::vector<int32_t> ref_table(c.slots(), -7), ref_lens(c.lists(), -7);
  h.page_table = c.pages.table.data();
  h.seq_lens = c.lens.data();
  h.out_table = ref_table.data();
  h.out_lens = ref_lens.data();
  cpu::window_page_plan(h);
  DeviceInputs in(c);
  DevicePlan out(c);
  WindowPagePlanArgs g = h;
  g.page_table = in.table.data();
  g.seq_lens = in.lens.data();
  g.out_table = out.table.data();
  g.out_lens = out.lens.data();
  ASSERT_EQ(cuda::window_page_plan(g, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(test::to_host(out.table), ref_table);
  EXPECT_EQ(test::to_host(out.lens), ref_lens);
}

}  // namespace
}  // namespace skim
