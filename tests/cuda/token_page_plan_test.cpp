// cuda::token_page_plan against its CPU reference (cpu::token_page_plan, which tests/attention/
// token_page_plan_test.cpp holds to its definition) on fresh random token plans over shuffled
// pages, lists of one tile and of many: the same plans, lengths and rewritten positions, bit for
// bit. Then cuda::token_decode_attention through those plans (per-KV-head tables, as cs reads
// KV beyond GPU memory) against the CPU reference through them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../token_page_plan_case.h"
#include "backend/cpu/token_decode_attention.h"
#include "backend/cpu/token_page_plan.h"
#include "backend/cuda/token_decode_attention.cuh"
#include "backend/cuda/token_page_plan.cuh"
#include "device_vectors.h"
#include "token_decode_gpu.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

struct Shape {
  int d, hkv, group;
  std::vector<int> lens;
};
const std::vector<Shape> kShapes = {{128, 2, 4, {1, 300, 57, 700}}, {64, 8, 4, {33000, 1, 2048}}, {128, 1, 8, {20000}}};

TEST(CudaTokenPagePlan, MatchesTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const Shape& s : kShapes) {
    const test::TokenCase c = test::make_token_case(false, s.lens, s.d, s.hkv, s.group);
    test::TokenPagePlanCase want;
    TokenPagePlanArgs a = want.args(c);
    test::TokenPagePlanCase got;  // the same initial buffers, filled on the device
    got.args(c);
    cpu::token_page_plan(a);
    auto lists = to_device(c.lists), lens = to_device(c.list_lens), table = to_device(c.table);
    auto plan_table = to_device(got.plan_table), plan_lens = to_device(got.plan_lens),
         plan_tokens = to_device(got.plan_tokens);
    a.token_lists = lists.data();
    a.token_lens = lens.data();
    a.page_table = table.data();
    a.plan_table = plan_table.data();
    a.plan_lens = plan_lens.data();
    a.plan_tokens = plan_tokens.data();
    ASSERT_EQ(cuda::token_page_plan(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string what = "batch " + std::to_string(s.lens.size()) + ", longest " + std::to_string(c.t.max_tokens);
    EXPECT_EQ(to_host(plan_table), want.plan_table) << what;
    EXPECT_EQ(to_host(plan_lens), want.plan_lens) << what;
    EXPECT_EQ(to_host(plan_tokens), want.plan_tokens) << what;
  }
}

TEST(CudaTokenDecode, MatchesTheCpuReferenceThroughPerKvHeadTables) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const Shape& s : kShapes) {
    const test::TokenCase c = test::make_token_case(false, s.lens, s.d, s.hkv, s.group);
    test::TokenPagePlanCase plan;
    cpu::token_page_plan(plan.args(c));
    const size_t heads = size_t(c.t.attn.batch) * c.heads();
    std::vector<float> o(c.q.size()), lse(heads);
    TokenDecodeArgs ref = plan.attention(c);
    ref.attn.o = o.data();
    ref.attn.lse = lse.data();
    cpu::token_decode_attention(ref);

    const test::TokenDecodeGpuRun g =
        test::run_token_decode_on_gpu(c, plan.attention(c), plan.plan_table, plan.plan_lens, plan.plan_tokens);
    const std::vector<float>& got_o = g.o;
    const std::vector<float>& got_lse = g.lse;
    for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(got_o[i], o[i], 2e-4) << "o[" << i << "]";
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(lse[i])) EXPECT_EQ(got_lse[i], lse[i]) << "lse of an empty list";
      else ASSERT_NEAR(got_lse[i], lse[i], 2e-4) << "lse[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace skim
