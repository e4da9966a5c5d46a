// cuda::page_cache_map against its CPU reference (cpu::page_cache_map, itself tested against a
// plain LRU in test_attention) step after step on fresh random plans: overlapping lists,
// written pages dropped between steps, a step too large for the cache refused; the same counts,
// copies, slot tables and cache state bit for bit. Then cuda::page_cache_gather copies the
// missed pages from a pinned host pool into their slots. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "../test_random.h"
#include "backend/cpu/page_cache_map.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/page_cache.cuh"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

struct State {
  std::vector<int32_t> slot_of_page, page_in_slot;
  std::vector<int64_t> last_used;
  State(int slots, int pages) : slot_of_page(size_t(pages), -1), page_in_slot(size_t(slots), -1), last_used(size_t(slots), -1) {}
};

TEST(CudaPageCache, MapMatchesTheCpuReferenceStepAfterStep) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const int host_pages = 3000, slots = 700, lists = 8, max_pages = 96, steps = 40;
  State cpu_state(slots, host_pages);
  auto d_slot_of_page = to_device(cpu_state.slot_of_page), d_page_in_slot = to_device(cpu_state.page_in_slot);
  auto d_last_used = to_device(cpu_state.last_used);
  cuda::DeviceBuffer<uint8_t> ws(cuda::page_cache_workspace_size(host_pages, slots));
  cuda::check(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset");
  int refused = 0, copies_total = 0, hits_total = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    // Lists drifting over the pool (consecutive steps overlap), a few written pages; every
    // tenth step far too large for the cache.
    const bool too_large = step % 10 == 9;
    const int center = 50 * step % (host_pages - 400);
    std::vector<int32_t> table(size_t(lists) * max_pages, 0), list_pages(static_cast<size_t>(lists));
    // A too large step lists lists x max_pages distinct pages (768 > 700 slots); random draws
    // over the pool repeat too often to be sure of it.
    for (int l = 0; l < lists; ++l) {
      list_pages[size_t(l)] = too_large ? max_pages : test::random_int(1, max_pages / 3);
      for (int j = 0; j < list_pages[size_t(l)]; ++j)
        table[size_t(l) * max_pages + j] = too_large ? (997 * step + l * max_pages + j) % host_pages
                                                     : center + test::random_int(0, 300) + (l % 2) * 40;
    }
    std::vector<int32_t> written;
    for (int w = test::random_int(0, 6); w > 0; --w) written.push_back(center + test::random_int(0, 340));

    std::vector<int32_t> slot_table(table.size(), -7), copy_page(size_t(slots), -7), copy_slot(size_t(slots), -7),
        counts(3, -7);
    PageCacheArgs a{.lists = lists, .max_pages = max_pages, .table = table.data(), .list_pages = list_pages.data(),
                    .slot_table = slot_table.data(), .slots = slots, .num_host_pages = host_pages,
                    .slot_of_page = cpu_state.slot_of_page.data(), .page_in_slot = cpu_state.page_in_slot.data(),
                    .last_used = cpu_state.last_used.data(), .step = step, .written = written.data(),
                    .num_written = int(written.size()), .copy_page = copy_page.data(), .copy_slot = copy_slot.data(),
                    .counts = counts.data()};
    const bool ok = cpu::page_cache_map(a);

    // Every other step the plan as the decode kernel reads it: lengths in tokens (the last page
    // partly used) and the step from a device counter (a graph's replays).
    std::vector<int32_t> list_lens(list_pages.size());
    for (size_t l = 0; l < list_pages.size(); ++l) list_lens[l] = list_pages[l] * 16 - int32_t(l % 16);
    const bool as_decode = step % 2 == 1;
    auto d_table = to_device(table), d_list_pages = to_device(list_pages), d_written = to_device(written);
    auto d_list_lens = to_device(list_lens);
    auto d_step = to_device(std::vector<int64_t>{step});
    auto d_slot_table = to_device(std::vector<int32_t>(table.size(), -7));
    auto d_copy_page = to_device(std::vector<int32_t>(size_t(slots), -7));
    auto d_copy_slot = to_device(std::vector<int32_t>(size_t(slots), -7));
    auto d_counts = to_device(std::vector<int32_t>(3, -7));
    PageCacheArgs g = a;
    g.table = d_table.data();
    g.list_pages = as_decode ? nullptr : d_list_pages.data();
    g.list_lens = d_list_lens.data();
    g.page_size = 16;
    if (as_decode) g.step = -5, g.step_counter = d_step.data();
    g.slot_table = d_slot_table.data();
    g.slot_of_page = d_slot_of_page.data();
    g.page_in_slot = d_page_in_slot.data();
    g.last_used = d_last_used.data();
    g.written = d_written.data();
    g.copy_page = d_copy_page.data();
    g.copy_slot = d_copy_slot.data();
    g.counts = d_counts.data();
    ASSERT_EQ(cuda::page_cache_map(g, {ws.data(), ws.bytes()}, nullptr), cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "page_cache_map");

    const std::vector<int32_t> got_counts = to_host(d_counts);
    ASSERT_EQ(got_counts, counts);
    refused += !ok;
    if (ok) {
      copies_total += counts[0];
      hits_total += counts[1];
      const std::vector<int32_t> got_page = to_host(d_copy_page), got_slot = to_host(d_copy_slot);
      ASSERT_TRUE(std::equal(copy_page.begin(), copy_page.begin() + counts[0], got_page.begin()));
      ASSERT_TRUE(std::equal(copy_slot.begin(), copy_slot.begin() + counts[0], got_slot.begin()));
      const std::vector<int32_t> got_table = to_host(d_slot_table);
      for (int l = 0; l < lists; ++l)
        for (int j = 0; j < list_pages[size_t(l)]; ++j)
          ASSERT_EQ(got_table[size_t(l) * max_pages + j], slot_table[size_t(l) * max_pages + j]) << "list " << l;
    }
    ASSERT_EQ(to_host(d_slot_of_page), cpu_state.slot_of_page);
    ASSERT_EQ(to_host(d_page_in_slot), cpu_state.page_in_slot);
    ASSERT_EQ(to_host(d_last_used), cpu_state.last_used);
  }
  EXPECT_EQ(refused, steps / 10);
  EXPECT_GT(hits_total, copies_total) << "drifting lists should mostly hit";
  std::printf("[ page cache ] %d steps: %d refused, %d copies, %d hits\n", steps, refused, copies_total, hits_total);
  // The workspace is zero again (the next call needs no clearing).
  const std::vector<uint8_t> w = to_host(ws);
  EXPECT_TRUE(std::all_of(w.begin(), w.begin() + host_pages, [](uint8_t x) { return x == 0; }));
}

TEST(CudaPageCache, GatherCopiesTheMissedPagesFromPinnedMemory) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const int host_pages = 64, slots = 16;
  const size_t page_elems = 2 * 16 * 128;  // 2 KV heads of 16 x 128
  uint16_t *host_k = nullptr, *host_v = nullptr;
  cuda::check(cudaHostAlloc(reinterpret_cast<void**>(&host_k), host_pages * page_elems * 2, cudaHostAllocMapped), "cudaHostAlloc");
  cuda::check(cudaHostAlloc(reinterpret_cast<void**>(&host_v), host_pages * page_elems * 2, cudaHostAllocMapped), "cudaHostAlloc");
  for (size_t i = 0; i < host_pages * page_elems; ++i) {
    host_k[i] = uint16_t(test::random_int(0, 65535));
    host_v[i] = uint16_t(test::random_int(0, 65535));
  }
  const std::vector<int32_t> copy_page = {5, 63, 0, 17}, copy_slot = {2, 15, 0, 9}, counts = {3, 0, 0};  // the 4th not copied
  auto dp = to_device(copy_page), ds = to_device(copy_slot), dc = to_device(counts);
  cuda::DeviceBuffer<uint16_t> slot_k(slots * page_elems), slot_v(slots * page_elems);
  cuda::check(cudaMemset(slot_k.data(), 0, slot_k.bytes()), "cudaMemset");
  cuda::check(cudaMemset(slot_v.data(), 0, slot_v.bytes()), "cudaMemset");
  ASSERT_EQ(cuda::page_cache_gather(dp.data(), ds.data(), dc.data(), slots, host_k, host_v, slot_k.data(), slot_v.data(),
                                    page_elems, 0, nullptr),
            cudaSuccess);
  cuda::check(cudaDeviceSynchronize(), "page_cache_gather");
  const std::vector<uint16_t> got_k = to_host(slot_k), got_v = to_host(slot_v);
  for (int i = 0; i < 4; ++i) {
    const bool copied = i < counts[0];
    for (size_t e = 0; e < page_elems; ++e) {
      const size_t at = size_t(copy_slot[size_t(i)]) * page_elems + e, from = size_t(copy_page[size_t(i)]) * page_elems + e;
      ASSERT_EQ(got_k[at], copied ? host_k[from] : uint16_t(0)) << "copy " << i;
      ASSERT_EQ(got_v[at], copied ? host_v[from] : uint16_t(0)) << "copy " << i;
    }
  }
  // A cache per KV head: head 1's piece of each page (16 x 128 of the page's 2 x 16 x 128).
  const size_t piece = page_elems / 2;
  cuda::check(cudaMemset(slot_k.data(), 0, slot_k.bytes()), "cudaMemset");
  cuda::check(cudaMemset(slot_v.data(), 0, slot_v.bytes()), "cudaMemset");
  ASSERT_EQ(cuda::page_cache_gather(dp.data(), ds.data(), dc.data(), slots, host_k + piece, host_v + piece, slot_k.data(),
                                    slot_v.data(), piece, page_elems, nullptr),
            cudaSuccess);
  cuda::check(cudaDeviceSynchronize(), "page_cache_gather (a head's pieces)");
  const std::vector<uint16_t> head_k = to_host(slot_k), head_v = to_host(slot_v);
  for (int i = 0; i < counts[0]; ++i)
    for (size_t e = 0; e < piece; ++e) {
      const size_t at = size_t(copy_slot[size_t(i)]) * piece + e, from = size_t(copy_page[size_t(i)]) * page_elems + piece + e;
      ASSERT_EQ(head_k[at], host_k[from]) << "piece " << i;
      ASSERT_EQ(head_v[at], host_v[from]) << "piece " << i;
    }
  cudaFreeHost(host_k);
  cudaFreeHost(host_v);
}

}  // namespace
}  // namespace skim
