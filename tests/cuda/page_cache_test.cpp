// cuda::page_cache_map against its CPU reference (cpu::page_cache_map, itself tested against a
// plain LRU in test_attention) step after step on fresh random plans: overlapping lists,
// written pages dropped between steps, a step too large for the cache refused; the same counts,
// copies, slot tables and cache state bit for bit, prefetches (maps made ahead) among them. Then cuda::page_cache_gather copies the
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
    // Prefetches (maps made ahead: stamped as the step before, only older slots taken) at steps
    // 5 and 7 of every ten; step 4 fills 600 of the 700 slots, so step 5's prefetch of 256 new
    // pages finds only 100 it may take.
    const bool too_large = step % 10 == 9, fills = step % 10 == 4, floods = step % 10 == 5;
    const bool prefetch = floods || step % 10 == 7;
    const int center = 50 * step % (host_pages - 400);
    std::vector<int32_t> table(size_t(lists) * max_pages, 0), list_pages(static_cast<size_t>(lists));
    // A too large step lists lists x max_pages distinct pages (768 > 700 slots); random draws
    // over the pool repeat too often to be sure of it.
    const int distinct_pages = too_large ? max_pages : fills ? 75 : floods ? 32 : 0;
    for (int l = 0; l < lists; ++l) {
      list_pages[size_t(l)] = distinct_pages ? distinct_pages : test::random_int(1, max_pages / 3);
      for (int j = 0; j < list_pages[size_t(l)]; ++j)
        table[size_t(l) * max_pages + j] = distinct_pages
                                               ? (997 * step + (floods ? 1500 : 0) + l * distinct_pages + j) % host_pages
                                               : center + test::random_int(0, 300) + (l % 2) * 40;
    }
    std::vector<int32_t> written;
    for (int w = test::random_int(0, 6); w > 0; --w) written.push_back(center + test::random_int(0, 340));

    std::vector<int32_t> slot_table(table.size(), -7), copy_page(size_t(slots), -7), copy_slot(size_t(slots), -7),
        counts(3, -7);
    PageCacheArgs a{.lists = lists, .max_pages = max_pages, .table = table.data(), .list_pages = list_pages.data(),
                    .slot_table = slot_table.data(), .slots = slots, .num_host_pages = host_pages,
                    .slot_of_page = cpu_state.slot_of_page.data(), .page_in_slot = cpu_state.page_in_slot.data(),
                    .last_used = cpu_state.last_used.data(), .step = step, .prefetch = prefetch, .written = written.data(),
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
    if (floods) {  // its hits (pages of older steps) are stamped as the step before too: theirs are not free
      EXPECT_EQ(counts[0] + counts[1], 100) << "a prefetch takes only the slots the step before left";
    }
    if (ok && distinct_pages == 0) {  // the drifting steps' hits and copies
      copies_total += counts[0];
      hits_total += counts[1];
    }
    if (ok) {
      const std::vector<int32_t> got_page = to_host(d_copy_page), got_slot = to_host(d_copy_slot);
      ASSERT_TRUE(std::equal(copy_page.begin(), copy_page.begin() + counts[0], got_page.begin()));
      ASSERT_TRUE(std::equal(copy_slot.begin(), copy_slot.begin() + counts[0], got_slot.begin()));
      const std::vector<int32_t> got_table = to_host(d_slot_table);
      for (int l = 0; l < lists; ++l)
        for (int j = 0; j < list_pages[size_t(l)]; ++j)
          ASSERT_EQ(got_table[size_t(l) * max_pages + j], slot_table[size_t(l) * max_pages + j]) << "list " << l;
      if (prefetch) {
        EXPECT_EQ(got_table, std::vector<int32_t>(table.size(), -7)) << "a prefetch writes no slot table";
      }
    }
    ASSERT_EQ(to_host(d_slot_of_page), cpu_state.slot_of_page);
    ASSERT_EQ(to_host(d_page_in_slot), cpu_state.page_in_slot);
    ASSERT_EQ(to_host(d_last_used), cpu_state.last_used);
  }
  EXPECT_EQ(refused, steps / 10);
  // Consecutive steps overlap, but every tenth step floods the cache (measured on an H100: about as
  // many hits as copies); the claim here is only that the cache keeps pages across steps.
  EXPECT_GT(2 * hits_total, copies_total) << "drifting lists should hit often";  // (the steps after a flood copy more)
  std::printf("[ page cache ] %d steps: %d refused, %d copies, %d hits\n", steps, refused, copies_total, hits_total);
  // The workspace is zero again (the next call needs no clearing).
  const std::vector<uint8_t> w = to_host(ws);
  EXPECT_TRUE(std::all_of(w.begin(), w.begin() + host_pages, [](uint8_t x) { return x == 0; }));
}

// A layer's KV heads in one launch (PageCacheBatch, as HostKVSlots maps them): each cache's
// counts, copies, slot table entries and state equal the CPU reference run on that cache alone,
// over a per-(row, KV head) plan with lengths in tokens.
TEST(CudaPageCache, BatchMapsEveryCacheAsAlone) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const int host_pages = 500, slots = 120, rows = 3, kv = 4, max_pages = 40, ps = 16, steps = 12;
  std::vector<State> cpu(size_t(kv), State(slots, host_pages));
  std::vector<int32_t> slot_of_page, page_in_slot;
  std::vector<int64_t> last_used;
  for (const State& c : cpu) {
    slot_of_page.insert(slot_of_page.end(), c.slot_of_page.begin(), c.slot_of_page.end());
    page_in_slot.insert(page_in_slot.end(), c.page_in_slot.begin(), c.page_in_slot.end());
    last_used.insert(last_used.end(), c.last_used.begin(), c.last_used.end());
  }
  auto d_slot_of_page = to_device(slot_of_page), d_page_in_slot = to_device(page_in_slot);
  auto d_last_used = to_device(last_used);
  cuda::DeviceBuffer<uint8_t> ws(cuda::page_cache_workspace_size(host_pages, slots, kv));
  cuda::check(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset");
  cuda::DeviceBuffer<unsigned long long> d_totals(2);
  cuda::check(cudaMemset(d_totals.data(), 0, d_totals.bytes()), "cudaMemset");
  long copies = 0, hits = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    // [rows][kv][max_pages] pages drifting with the step, each head its own; lengths in tokens.
    std::vector<int32_t> table(size_t(rows) * kv * max_pages, 0), lens(size_t(rows) * kv);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < kv; ++h) {
        const size_t list = size_t(r) * kv + h;
        lens[list] = test::random_int(1, max_pages * ps);
        for (int j = 0; j < (lens[list] + ps - 1) / ps; ++j)
          table[list * max_pages + j] = (20 * step + 60 * h + test::random_int(0, 80)) % host_pages;
      }
    const std::vector<int32_t> written = {int32_t(20 * step % host_pages), 7};
    auto d_table = to_device(table), d_lens = to_device(lens), d_written = to_device(written);
    auto d_slot_table = to_device(std::vector<int32_t>(table.size(), -7));
    auto d_copy_page = to_device(std::vector<int32_t>(size_t(kv) * slots, -7));
    auto d_copy_slot = to_device(std::vector<int32_t>(size_t(kv) * slots, -7));
    auto d_counts = to_device(std::vector<int32_t>(size_t(kv) * 3, -7));
    const PageCacheArgs g{.lists = rows, .max_pages = max_pages, .table = d_table.data(),
                          .slot_table = d_slot_table.data(), .list_stride = kv * max_pages,
                          .slot_stride = kv * max_pages, .list_lens = d_lens.data(), .lens_stride = kv,
                          .page_size = ps, .slots = slots, .num_host_pages = host_pages,
                          .slot_of_page = d_slot_of_page.data(), .page_in_slot = d_page_in_slot.data(),
                          .last_used = d_last_used.data(), .step = step, .written = d_written.data(),
                          .num_written = int(written.size()), .copy_page = d_copy_page.data(),
                          .copy_slot = d_copy_slot.data(), .counts = d_counts.data(), .totals = d_totals.data()};
    const cuda::PageCacheBatch batch{.caches = kv, .table = size_t(max_pages), .slot_table = size_t(max_pages), .lens = 1};
    ASSERT_EQ(cuda::page_cache_map(g, {ws.data(), ws.bytes()}, nullptr, batch), cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "page_cache_map (batch)");
    const std::vector<int32_t> got_counts = to_host(d_counts), got_page = to_host(d_copy_page),
                               got_slot = to_host(d_copy_slot), got_table = to_host(d_slot_table);
    for (int h = 0; h < kv; ++h) {
      SCOPED_TRACE(testing::Message() << "head " << h);
      State& c = cpu[size_t(h)];
      std::vector<int32_t> slot_table(table.size(), -7), copy_page(size_t(slots), -7), copy_slot(size_t(slots), -7),
          counts(3, -7);
      const bool ok = cpu::page_cache_map(
          {.lists = rows, .max_pages = max_pages, .table = table.data() + size_t(h) * max_pages,
           .slot_table = slot_table.data() + size_t(h) * max_pages, .list_stride = kv * max_pages,
           .slot_stride = kv * max_pages, .list_lens = lens.data() + h, .lens_stride = kv, .page_size = ps,
           .slots = slots, .num_host_pages = host_pages, .slot_of_page = c.slot_of_page.data(),
           .page_in_slot = c.page_in_slot.data(), .last_used = c.last_used.data(), .step = step,
           .written = written.data(), .num_written = int(written.size()), .copy_page = copy_page.data(),
           .copy_slot = copy_slot.data(), .counts = counts.data()});
      ASSERT_TRUE(ok);
      copies += counts[0], hits += counts[1];
      ASSERT_EQ(std::vector<int32_t>(got_counts.begin() + h * 3, got_counts.begin() + h * 3 + 3), counts);
      for (int i = 0; i < counts[0]; ++i) {
        ASSERT_EQ(got_page[size_t(h) * slots + i], copy_page[size_t(i)]) << "copy " << i;
        ASSERT_EQ(got_slot[size_t(h) * slots + i], copy_slot[size_t(i)]) << "copy " << i;
      }
      for (int r = 0; r < rows; ++r) {
        const size_t list = size_t(r) * kv + h;
        for (int j = 0; j < (lens[list] + ps - 1) / ps; ++j)
          ASSERT_EQ(got_table[list * max_pages + j], slot_table[list * max_pages + j]) << "row " << r;
      }
    }
    const std::vector<int32_t> got_sop = to_host(d_slot_of_page), got_pis = to_host(d_page_in_slot);
    const std::vector<int64_t> got_used = to_host(d_last_used);
    for (int h = 0; h < kv; ++h) {
      const State& c = cpu[size_t(h)];
      ASSERT_TRUE(std::equal(c.slot_of_page.begin(), c.slot_of_page.end(), got_sop.begin() + long(h) * host_pages));
      ASSERT_TRUE(std::equal(c.page_in_slot.begin(), c.page_in_slot.end(), got_pis.begin() + long(h) * slots));
      ASSERT_TRUE(std::equal(c.last_used.begin(), c.last_used.end(), got_used.begin() + long(h) * slots));
    }
  }
  const std::vector<unsigned long long> totals = to_host(d_totals);
  EXPECT_EQ(totals[0], (unsigned long long)copies);
  EXPECT_EQ(totals[1], (unsigned long long)hits);
  EXPECT_GT(hits, 0);
  const std::vector<uint8_t> w = to_host(ws);  // each cache's marks are left zero
  const size_t one = cuda::page_cache_workspace_size(host_pages, slots);
  for (int h = 0; h < kv; ++h)
    EXPECT_TRUE(std::all_of(w.begin() + long(h * one), w.begin() + long(h * one) + host_pages,
                            [](uint8_t x) { return x == 0; }))
        << "head " << h;
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
  ASSERT_EQ(cuda::page_cache_gather({.copy_page = dp.data(), .copy_slot = ds.data(), .counts = dc.data(),
                                     .max_copies = slots, .host_k = host_k, .host_v = host_v, .slot_k = slot_k.data(),
                                     .slot_v = slot_v.data(), .page_elems = page_elems},
                                    nullptr),
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
  // A cache per KV head, both heads in one launch: head h's piece of each page (16 x 128 of the
  // page's 2 x 16 x 128) into its own slot pool; head 0 copies the first two pages listed, head 1
  // all three.
  const size_t piece = page_elems / 2;
  const std::vector<int32_t> both_page = {5, 63, 0, 17, 5, 63, 0, 17}, both_slot = {2, 15, 0, 9, 2, 15, 0, 9},
                             both_counts = {2, 0, 0, 3, 0, 0};
  auto bp = to_device(both_page), bs = to_device(both_slot), bc = to_device(both_counts);
  cuda::check(cudaMemset(slot_k.data(), 0, slot_k.bytes()), "cudaMemset");
  cuda::check(cudaMemset(slot_v.data(), 0, slot_v.bytes()), "cudaMemset");
  const size_t head_pool = size_t(slots) * piece;  // each head's pool: 16 slots of a piece
  ASSERT_EQ(cuda::page_cache_gather({.copy_page = bp.data(), .copy_slot = bs.data(), .counts = bc.data(),
                                     .max_copies = 4, .host_k = host_k, .host_v = host_v, .slot_k = slot_k.data(),
                                     .slot_v = slot_v.data(), .page_elems = piece, .host_page_stride = page_elems,
                                     .caches = 2, .host_cache_stride = piece, .slot_cache_stride = head_pool},
                                    nullptr),
            cudaSuccess);
  cuda::check(cudaDeviceSynchronize(), "page_cache_gather (heads' pieces)");
  const std::vector<uint16_t> head_k = to_host(slot_k), head_v = to_host(slot_v);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      const bool copied = i < both_counts[size_t(h) * 3];
      for (size_t e = 0; e < piece; ++e) {
        const size_t at = size_t(h) * head_pool + size_t(copy_slot[size_t(i)]) * piece + e;
        const size_t from = size_t(copy_page[size_t(i)]) * page_elems + size_t(h) * piece + e;
        ASSERT_EQ(head_k[at], copied ? host_k[from] : uint16_t(0)) << "head " << h << ", piece " << i;
        ASSERT_EQ(head_v[at], copied ? host_v[from] : uint16_t(0)) << "head " << h << ", piece " << i;
      }
    }
  cudaFreeHost(host_k);
  cudaFreeHost(host_v);
}

}  // namespace
}  // namespace skim
