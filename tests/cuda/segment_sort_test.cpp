// The selections' by-score sort (backend/cuda/segment_sort.cuh) against std::stable_sort by
// descending key, on fresh random lists with many equal keys (ties must keep the list's order,
// as on the CPU), empty and one-pair lists and lists at each of the sorts' sizes (the in-CTA
// network's 64 to 2048 items, the block sort's to 8192), with one payload and with two, on each
// path: a CTA per list and cub's segmented radix sort beyond kBlockSortItems. Slots outside the
// lists keep their payloads.
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
    for (const bool two : {false, true}) {
      const int lists = test::random_int(6, 12), stride = max_items;
      std::vector<uint32_t> keys(size_t(lists) * stride, 0xdeadbeefu);
      std::vector<int32_t> values(keys.size());
      std::vector<uint32_t> values2(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        values[i] = int32_t(test::random_int(0, 1 << 30));
        values2[i] = uint32_t(test::random_int(0, 1 << 30));
      }
      std::vector<int> begin(lists), end(lists);
      for (int l = 0; l < lists; ++l) {
        // Whole, empty, one pair, a block sort's size and one past it, then random lengths.
        const int sized = std::min(max_items, 64 << test::random_int(0, 7));
        const int n = l == 0 ? max_items : l == 1 ? 0 : l == 2 ? 1 : l == 3 ? sized
                    : l == 4 ? std::min(max_items, sized + 1) : test::random_int(0, max_items);
        // Few distinct keys: many ties; the largest and the smallest too (0 sorts with the padding).
        const uint32_t span = uint32_t(test::random_int(1, 50));
        begin[l] = l * stride + test::random_int(0, max_items - n);
        end[l] = begin[l] + n;
        for (int i = begin[l]; i < end[l]; ++i) {
          const int pick = test::random_int(0, 20);
          keys[i] = pick == 0 ? 0u : pick == 1 ? ~0u : 0x3f000000u + uint32_t(test::random_int(0, int(span)));
        }
      }
      auto dk = test::to_device(keys);
      auto dv = test::to_device(values);
      auto dv2 = test::to_device(values2);
      auto db = test::to_device(begin), de = test::to_device(end);
      const size_t scratch = cuda::segment_sort_scratch_bytes(int(keys.size()), lists, max_items);
      cuda::DeviceBuffer<uint8_t> ws(std::max<size_t>(scratch, 1));
      ASSERT_EQ(cuda::segment_sort_desc({.lists = lists, .total = int(keys.size()), .max_items = max_items,
                                         .keys = dk.data(), .values = dv.data(), .values2 = two ? dv2.data() : nullptr,
                                         .begin = db.data(), .end = de.data(), .scratch = ws.data(),
                                         .scratch_bytes = ws.bytes()},
                                        nullptr),
                cudaSuccess);
      cuda::check(cudaDeviceSynchronize(), "segment_sort_desc");
      const std::vector<int32_t> gv = test::to_host(dv);
      const std::vector<uint32_t> gv2 = test::to_host(dv2);
      std::vector<int32_t> want = values;
      std::vector<uint32_t> want2 = values2;
      for (int l = 0; l < lists; ++l) {
        std::vector<int> order(size_t(end[l] - begin[l]));
        std::iota(order.begin(), order.end(), begin[l]);
        std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return keys[x] > keys[y]; });
        for (size_t j = 0; j < order.size(); ++j) {
          want[begin[l] + j] = values[order[j]];
          if (two) want2[begin[l] + j] = values2[order[j]];
        }
      }
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(gv[i], want[i]) << "max_items " << max_items << ", slot " << i;
        ASSERT_EQ(gv2[i], want2[i]) << "max_items " << max_items << ", two payloads " << two << ", slot " << i;
      }
    }
  }
}

}  // namespace
}  // namespace skim
