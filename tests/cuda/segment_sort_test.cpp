// The selections' by-score sort (backend/cuda/segment_sort.cuh) against std::stable_sort by
// descending key, on fresh random lists with many equal keys (ties must keep the list's order,
// as on the CPU), empty and one-pair lists, on each path: a CTA per list (bounds 2048 and 8192)
// and cub's segmented radix sort beyond.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "../test_random.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/segment_sort.cuh"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

TEST(CudaSegmentSort, EqualsAStableSortByDescendingKey) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const int max_items : {300, 2048, 8192, 9000}) {
    const int lists = test::random_int(1, 12), stride = max_items;
    std::vector<uint32_t> keys(size_t(lists) * stride, 0xdeadbeefu);
    std::vector<int32_t> values(keys.size(), -7);
    std::vector<int> begin(lists), end(lists);
    for (int l = 0; l < lists; ++l) {
      const int n = l == 0 ? max_items : l == 1 ? 0 : l == 2 ? 1 : test::random_int(0, max_items);
      // Few distinct keys: many ties; the largest and the smallest too (0 sorts with the padding).
      const uint32_t span = uint32_t(test::random_int(1, 50));
      begin[l] = l * stride + test::random_int(0, max_items - n);
      end[l] = begin[l] + n;
      for (int i = begin[l]; i < end[l]; ++i) {
        const int pick = test::random_int(0, 20);
        keys[i] = pick == 0 ? 0u : pick == 1 ? ~0u : 0x3f000000u + uint32_t(test::random_int(0, int(span)));
        values[i] = i;
      }
    }
    auto dk = test::to_device(keys), dsk = test::to_device(keys);
    auto dv = test::to_device(values), dsv = test::to_device(values);
    auto db = test::to_device(begin), de = test::to_device(end);
    const size_t scratch = cuda::segment_sort_scratch_bytes(int(keys.size()), lists, max_items);
    cuda::DeviceBuffer<uint8_t> ws(std::max<size_t>(scratch, 1));
    ASSERT_EQ(cuda::segment_sort_desc({.lists = lists, .total = int(keys.size()), .max_items = max_items, .keys = dk.data(),
                                 .sorted_keys = dsk.data(), .values = dv.data(), .sorted_values = dsv.data(),
                                 .begin = db.data(), .end = de.data(), .scratch = ws.data(), .scratch_bytes = ws.bytes()},
                                nullptr),
              cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "segment_sort_desc");
    const std::vector<uint32_t> gk = test::to_host(dsk);
    const std::vector<int32_t> gv = test::to_host(dsv);
    for (int l = 0; l < lists; ++l) {
      std::vector<int> order(size_t(end[l] - begin[l]));
      std::iota(order.begin(), order.end(), begin[l]);
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return keys[x] > keys[y]; });
      for (size_t j = 0; j < order.size(); ++j) {
        ASSERT_EQ(gv[begin[l] + j], order[j]) << "max_items " << max_items << ", list " << l << ", rank " << j;
        ASSERT_EQ(gk[begin[l] + j], keys[order[j]]) << "max_items " << max_items << ", list " << l << ", rank " << j;
      }
    }
  }
}

}  // namespace
}  // namespace skim
