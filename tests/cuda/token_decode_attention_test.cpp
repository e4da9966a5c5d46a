// cuda::token_decode_attention against its CPU reference (cpu::token_decode_attention, which
// tests/attention/token_decode_test.cpp holds to the definition) on fresh random inputs:
// head_dim 64 and 128, lists shared by GQA groups of 1, 4, 7 and 8 heads and lists per query
// head, shuffled pages, empty and whole lists, short sequences (one chunk: written directly)
// and long ones (split across CTAs, merged); a second call on the same workspace is bitwise
// equal (the split is static).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../token_decode_case.h"
#include "backend/cpu/token_decode_attention.h"
#include "backend/cuda/token_decode_attention.cuh"
#include "device_vectors.h"
#include "token_decode_gpu.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

TEST(CudaTokenDecode, MatchesTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int d, hkv, group;
    std::vector<int> lens;
  };
  const std::vector<Shape> shapes = {{128, 2, 4, {1, 300, 57, 700}}, {64, 2, 4, {1, 300, 57, 700}},
                                     {128, 1, 8, {20000}},          {64, 3, 1, {9000, 17}},
                                     {128, 1, 7, {4099, 31}},       {128, 8, 4, {33000, 1, 2048}}};
  for (const Shape& s : shapes)
    for (bool per_head : {false, true}) {
      const test::TokenCase c = test::make_token_case(per_head, s.lens, s.d, s.hkv, s.group);
      std::vector<float> o(c.q.size()), lse(size_t(c.t.attn.batch) * c.heads());
      TokenDecodeArgs ref = c.t;
      ref.attn.o = o.data();
      ref.attn.lse = lse.data();
      cpu::token_decode_attention(ref);
      const test::TokenDecodeGpuRun g = test::run_token_decode_on_gpu(c, c.t, c.table, c.lens, c.lists);
      const std::string what = "d " + std::to_string(s.d) + " group " + std::to_string(s.group) +
                               (per_head ? " per head" : " shared") + " batch " + std::to_string(s.lens.size());
      for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(g.o[i], o[i], 2e-4) << what << ", o[" << i << "]";
      for (size_t i = 0; i < lse.size(); ++i) {
        if (std::isinf(lse[i]))
          EXPECT_EQ(g.lse[i], lse[i]) << what << ", lse of an empty list";
        else
          ASSERT_NEAR(g.lse[i], lse[i], 2e-4) << what << ", lse[" << i << "]";
      }
    }
}

TEST(CudaTokenDecode, RefusesWhatItCannotRun) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  test::TokenCase c = test::make_token_case(false, {10}, 128, 1, 9);  // 9 heads share one list
  EXPECT_EQ(cuda::token_decode_attention(c.t, nullptr), cudaErrorInvalidValue);
  c = test::make_token_case(false, {10}, 96, 1, 4);  // head_dim 96
  EXPECT_EQ(cuda::token_decode_attention(c.t, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace skim
