// `--host-kv-slots auto`'s arithmetic (kv/host_kv_budget.h): the budget left beside the
// reserve, and the most slots whose bytes fit it, against a brute-force search.
#include "kv/host_kv_budget.h"

#include <gtest/gtest.h>

namespace skim {
namespace {

constexpr int64_t kGiB = int64_t(1) << 30;

TEST(HostKvBudget, LeavesATenthOfTheDeviceAndAtLeastTwoGiB) {
  EXPECT_EQ(host_kv_cache_budget(60 * kGiB, 80 * kGiB), 52 * kGiB);  // 8 GiB kept
  EXPECT_EQ(host_kv_cache_budget(10 * kGiB, 16 * kGiB), 8 * kGiB);   // 2 GiB kept, not 1.6
  EXPECT_EQ(host_kv_cache_budget(kGiB, 80 * kGiB), 0);
}

TEST(HostKvBudget, MostSlotsWithinTheBudget) {
  // A slot's pages plus a fixed part, as HostKVSlots::device_bytes grows.
  const auto bytes = [](int64_t n) { return 1000 + 256 * n; };
  for (const int64_t budget : {int64_t(0), int64_t(1255), int64_t(1256), int64_t(5000), int64_t(1) << 40})
    for (const int64_t max_slots : {int64_t(0), int64_t(1), int64_t(7), int64_t(4096)}) {
      int64_t want = 0;
      for (int64_t n = 1; n <= max_slots; ++n)
        if (bytes(n) <= budget) want = n;
      EXPECT_EQ(most_slots_within(budget, max_slots, bytes), want) << budget << " bytes, " << max_slots << " slots";
    }
}

}  // namespace
}  // namespace skim
