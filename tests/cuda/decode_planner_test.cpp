// The GPU's selection stage (backend/cuda/decode_planner.h) against the registry: every
// selector the registry says runs on cuda has a planner, and the planners' byte counts are
// what their plans read (every key when dense; digests and kept pages for gbsa, dense in its
// dense layers).
#include <gtest/gtest.h>

#include "attention/policy_registry.h"
#include "attention/group_page_select_args.h"
#include "backend/cuda/decode_planner.h"
#include "core/error.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

cuda::PlannerShape shape() { return {4, 8, 2, 64, 16, 4, 64}; }

TEST(DecodePlanner, EveryGpuSelectorOfTheRegistryHasOne) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const PolicyInfo& info : policy_registry()) {
    if (info.stage != PolicyStage::Selector || !info.runs_on("cuda")) continue;
    EXPECT_NO_THROW(cuda::make_decode_planner(info.name, shape())) << info.name;
  }
}

TEST(DecodePlanner, BytesAreThoseOfThePlan) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const cuda::PlannerShape s = shape();
  const double per_token = 2.0 * s.num_kv_heads * s.head_dim * 2;
  auto dense = cuda::make_decode_planner("dense", s);
  EXPECT_EQ(dense->bytes_read(0, 1000), 1000 * per_token);
  auto gbsa = cuda::make_decode_planner("gbsa:keep=0.25,n_min=4,dense_layers=1", s);
  EXPECT_EQ(gbsa->bytes_read(0, 1000), 1000 * per_token);  // a dense layer
  const int pages = (1000 + 15) / 16, kept = group_pages_kept(pages, 0.25, 4);
  EXPECT_EQ(gbsa->bytes_read(1, 1000), std::min(1000, kept * 16) * per_token + pages * s.num_kv_heads * s.head_dim * 2 * 2.0);
  EXPECT_THROW(cuda::make_decode_planner("streaming", s), Error);  // no GPU selection kernel
}

}  // namespace
}  // namespace skim
