// CUDA paged decode attention against the CPU reference (see paged_decode_parity.h). Skips
// on machines without a CUDA device (CI compiles it, the GPU machine runs it).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

#include "paged_decode_parity.h"

namespace skim {
namespace {

TEST(CudaPagedDecodeAttention, MatchesCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  uint64_t s = seed;
  for (const auto& c : test::default_parity_cases()) {
    SCOPED_TRACE(c.name() + " seed " + std::to_string(s));
    const test::ParityResult r = test::run_parity_case(c, s++);
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_TRUE(r.all_finite);
    EXPECT_TRUE(r.empty_ok);
    EXPECT_TRUE(r.deterministic);
    EXPECT_TRUE(r.bf16_ok) << "o_bf16: not the fp32 output rounded, or o written";
    EXPECT_LT(r.o_rel_err, 2e-3);
    EXPECT_LT(r.lse_abs_err, 1e-3);
  }
}

TEST(CudaPagedDecodeAttention, RejectsUnsupportedShapes) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  PagedDecodeArgs a;
  a.batch = 1;
  a.num_heads = 8;
  a.num_kv_heads = 2;
  a.head_dim = 96;  // not 64 or 128
  a.max_pages_per_seq = 4;
  a.max_seq_len = 64;
  EXPECT_EQ(cuda::paged_decode_attention(a, nullptr), cudaErrorInvalidValue);
  a.head_dim = 128;
  a.max_seq_len = 65;  // longer than the page table can hold
  EXPECT_EQ(cuda::paged_decode_attention(a, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::paged_decode_workspace_size(a), 0u);
}

}  // namespace
}  // namespace skim
