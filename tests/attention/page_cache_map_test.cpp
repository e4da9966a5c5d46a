// cpu::page_cache_map (kv/page_cache_args.h) against a plain LRU written here: random plans of
// overlapping page lists over many steps, pages written between steps; the same copies, slot
// tables, counts and cache state step after step. Then the properties the cache exists for: a
// written page is copied again before it is read (no stale page), a sliding window copies only
// its new page once warm, a step with more distinct pages than slots is refused with nothing
// changed, and a page id outside the pool is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "../test_random.h"
#include "backend/cpu/page_cache_map.h"

namespace skim {
namespace {

// The cache and one step's plan, in the args' layout.
struct Cache {
  int slots, host_pages;
  std::vector<int32_t> slot_of_page, page_in_slot;
  std::vector<int64_t> last_used;
  Cache(int s, int h) : slots(s), host_pages(h), slot_of_page(size_t(h), -1), page_in_slot(size_t(s), -1),
                        last_used(size_t(s), -1) {}
};

struct Step {
  int lists, max_pages;
  std::vector<int32_t> table, list_pages, written;
  std::vector<int32_t> slot_table, copy_page, copy_slot, counts;
  Step(int l, int m, std::vector<int32_t> t, std::vector<int32_t> lp, std::vector<int32_t> w)
      : lists(l), max_pages(m), table(std::move(t)), list_pages(std::move(lp)), written(std::move(w)),
        counts(3, -1) {}
};

bool run(Cache& c, Step& st, int64_t step, bool prefetch = false) {
  st.slot_table.assign(st.table.size(), -7);
  st.copy_page.assign(size_t(c.slots), -7);
  st.copy_slot.assign(size_t(c.slots), -7);
  return cpu::page_cache_map({.lists = st.lists, .max_pages = st.max_pages, .table = st.table.data(),
                              .list_pages = st.list_pages.data(), .slot_table = st.slot_table.data(),
                              .slots = c.slots, .num_host_pages = c.host_pages, .slot_of_page = c.slot_of_page.data(),
                              .page_in_slot = c.page_in_slot.data(), .last_used = c.last_used.data(), .step = step,
                              .prefetch = prefetch, .written = st.written.data(), .num_written = int(st.written.size()),
                              .copy_page = st.copy_page.data(), .copy_slot = st.copy_slot.data(),
                              .counts = st.counts.data()});
}

// A plain LRU: slot -> (page, last use); victims found by repeated minimum search.
struct PlainLru {
  std::vector<std::pair<int32_t, int64_t>> slot;  // (page or -1, last use or -1)
  explicit PlainLru(int slots) : slot(size_t(slots), {-1, -1}) {}
  int find(int32_t page) const {
    for (size_t s = 0; s < slot.size(); ++s)
      if (slot[s].first == page) return int(s);
    return -1;
  }
  // The copies (page, slot) of one step, or refused.
  bool step(const std::set<int32_t>& pages, const std::vector<int32_t>& written, int64_t now,
            std::vector<std::pair<int32_t, int32_t>>& copies, int& hits) {
    copies.clear();
    hits = 0;
    if (pages.size() > slot.size()) return false;
    for (int32_t w : written)
      if (const int s = find(w); s >= 0) slot[size_t(s)] = {-1, -1};
    std::vector<int32_t> misses;
    for (int32_t p : pages)
      if (const int s = find(p); s >= 0) slot[size_t(s)].second = now, ++hits;
      else misses.push_back(p);
    std::vector<int32_t> victims;
    for (size_t k = 0; k < misses.size(); ++k) {
      int best = -1;
      for (size_t s = 0; s < slot.size(); ++s) {
        if (slot[s].second == now || std::find(victims.begin(), victims.end(), int32_t(s)) != victims.end()) continue;
        if (best < 0 || slot[s].second < slot[size_t(best)].second) best = int(s);
      }
      victims.push_back(best);
    }
    std::sort(victims.begin(), victims.end());
    for (size_t k = 0; k < misses.size(); ++k) {
      slot[size_t(victims[k])] = {misses[k], now};
      copies.push_back({misses[k], victims[k]});
    }
    return true;
  }
};

TEST(PageCacheMap, EqualsAPlainLru) {
  const int host_pages = 300, slots = 64;
  Cache c(slots, host_pages);
  PlainLru lru(slots);
  int refused = 0, copied = 0, hit = 0, center = 100;
  for (int64_t step = 0; step < 200; ++step) {
    Step st(test::random_int(1, 6), 12, {}, {}, {});
    st.table.assign(size_t(st.lists) * st.max_pages, 0);
    center = std::clamp(center + test::random_int(-2, 2), 0, host_pages - 40);  // a slow drift: overlaps
    std::set<int32_t> pages;
    for (int i = 0; i < st.lists; ++i) {
      st.list_pages.push_back(test::random_int(0, st.max_pages));
      for (int j = 0; j < st.list_pages.back(); ++j) {
        const int32_t p = step % 7 == 0 ? test::random_int(0, host_pages - 1) : center + test::random_int(0, 39);
        st.table[size_t(i) * st.max_pages + j] = p;
        pages.insert(p);
      }
    }
    for (int w = test::random_int(0, 3); w > 0; --w) st.written.push_back(test::random_int(0, host_pages - 1));
    std::vector<std::pair<int32_t, int32_t>> copies;
    int hits = 0;
    const bool want = lru.step(pages, st.written, step, copies, hits);
    ASSERT_EQ(run(c, st, step), want) << "step " << step;
    if (!want) {
      EXPECT_EQ(st.counts[2], 1);
      ++refused;
      continue;
    }
    ASSERT_EQ(st.counts[0], int(copies.size())) << "step " << step;
    EXPECT_EQ(st.counts[1], hits) << "step " << step;
    for (size_t k = 0; k < copies.size(); ++k) {
      EXPECT_EQ(st.copy_page[k], copies[k].first) << "step " << step << " copy " << k;
      EXPECT_EQ(st.copy_slot[k], copies[k].second) << "step " << step << " copy " << k;
    }
    for (int i = 0; i < st.lists; ++i)
      for (int j = 0; j < st.list_pages[size_t(i)]; ++j) {
        const size_t at = size_t(i) * st.max_pages + j;
        ASSERT_EQ(st.slot_table[at], lru.find(st.table[at])) << "step " << step;
        ASSERT_EQ(c.page_in_slot[size_t(st.slot_table[at])], st.table[at]);
      }
    for (int s = 0; s < slots; ++s) ASSERT_EQ(c.page_in_slot[size_t(s)], lru.slot[size_t(s)].first) << "slot " << s;
    copied += int(copies.size());
    hit += hits;
  }
  EXPECT_EQ(refused, 0) << "64 slots hold any step of at most 6 x 12 pages drawn from 40";
  EXPECT_GT(hit, copied) << "drifting selections mostly hit";
}

TEST(PageCacheMap, AWrittenPageIsCopiedAgainAndAWarmWindowCopiesOnlyItsNewPages) {
  const int window = 8;
  Cache c(2 * window, 1000);
  for (int64_t step = 0; step < 50; ++step) {
    // A window of the last `window` pages; the newest, step + window - 1, is written each step.
    Step st(1, window, {}, {}, {});
    for (int j = 0; j < window; ++j) st.table.push_back(int32_t(step + j));
    st.list_pages = {window};
    st.written = {int32_t(step + window - 1)};
    ASSERT_TRUE(run(c, st, step));
    const std::vector<int32_t> copies(st.copy_page.begin(), st.copy_page.begin() + st.counts[0]);
    if (step == 0) {
      EXPECT_EQ(st.counts[0], window);
    } else {
      EXPECT_EQ(copies, std::vector<int32_t>{int32_t(step + window - 1)})
          << "step " << step << ": the one new page, written before it is read";
    }
  }
  // A resident page written in between is copied again, into a slot the step may use.
  Step st(1, 2, {100, 101}, {2}, {});
  ASSERT_TRUE(run(c, st, 60));
  Step again(1, 2, {100, 101}, {2}, {101});
  ASSERT_TRUE(run(c, again, 61));
  EXPECT_EQ(again.counts[0], 1);
  EXPECT_EQ(again.copy_page[0], 101) << "the written page is not read stale";
  EXPECT_EQ(again.counts[1], 1);
}

// A prefetch (a map made ahead of the step's own: the next layer's guessed pages) stamps as the
// step before, takes only slots older than that, copies as many of its misses as those hold and
// writes no slot table; the step's own map then still evicts what it brought.
TEST(PageCacheMap, APrefetchStampsAsTheStepBeforeAndTakesOnlyOlderSlots) {
  Cache c(10, 100);
  Step first(1, 6, {0, 1, 2, 3, 4, 5}, {6}, {});
  ASSERT_TRUE(run(c, first, 1));  // slots 0-5, stamped 1
  Step ahead(1, 6, {3, 10, 11, 12, 13, 14}, {6}, {});
  ASSERT_TRUE(run(c, ahead, 2, /*prefetch=*/true));
  EXPECT_EQ(ahead.counts, (std::vector<int32_t>{4, 1, 0})) << "four free slots for five misses: 14 waits";
  EXPECT_EQ(std::vector<int32_t>(ahead.copy_page.begin(), ahead.copy_page.begin() + 4),
            (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(std::vector<int32_t>(ahead.copy_slot.begin(), ahead.copy_slot.begin() + 4),
            (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_EQ(c.slot_of_page[14], -1);
  for (int s = 0; s < 10; ++s) EXPECT_EQ(c.last_used[size_t(s)], 1) << "slot " << s << ": stamped as the step before";
  EXPECT_TRUE(std::all_of(ahead.slot_table.begin(), ahead.slot_table.end(), [](int32_t x) { return x == -7; }))
      << "a prefetch writes no slot table";
  // The step's own map: 10 and 0 hit; 14 misses and evicts the least recently used slot not
  // stamped now (all were stamped 1, ties to the lower slot, 0 now a hit): slot 1.
  Step own(1, 3, {0, 10, 14}, {3}, {});
  ASSERT_TRUE(run(c, own, 2));
  EXPECT_EQ(own.counts, (std::vector<int32_t>{1, 2, 0}));
  EXPECT_EQ(own.copy_page[0], 14);
  EXPECT_EQ(own.copy_slot[0], 1);
  EXPECT_EQ(own.slot_table, (std::vector<int32_t>{0, 6, 1}));
  // A prefetch larger than the cache is refused, as the step's own, and changes nothing.
  const Cache before = c;
  Step big(2, 6, {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}, {6, 6}, {});
  EXPECT_FALSE(run(c, big, 3, /*prefetch=*/true));
  EXPECT_EQ(big.counts[2], 1);
  EXPECT_EQ(c.last_used, before.last_used);
}

TEST(PageCacheMap, RefusesAStepLargerThanTheCacheAndPagesOutsideThePool) {
  Cache c(4, 50);
  Step fill(1, 3, {1, 2, 3}, {3}, {});
  ASSERT_TRUE(run(c, fill, 0));
  const Cache before = c;
  Step big(2, 3, {4, 5, 6, 7, 8, 1}, {3, 3}, {});
  EXPECT_FALSE(run(c, big, 1));
  EXPECT_EQ(big.counts[2], 1);
  EXPECT_EQ(c.slot_of_page, before.slot_of_page) << "a refused step changes nothing";
  EXPECT_EQ(c.last_used, before.last_used);
  Step outside(1, 1, {50}, {1}, {});
  EXPECT_THROW(run(c, outside, 2), std::invalid_argument);
}

}  // namespace
}  // namespace skim

namespace skim {
namespace {

// A plan as the decode kernel reads it (one KV head's lists of a per-(row, KV head) plan: every
// other list of the table, lengths in tokens) maps as the same lists packed with page counts:
// the same copies, counts, state and slots.
TEST(PageCacheMap, StridedListsWithTokenLengthsMapAsPackedOnes) {
  const int kv = 2, rows = 4, max_pages = 12, ps = 16, slots = 40, host_pages = 90;
  Cache packed_cache(slots, host_pages), strided_cache(slots, host_pages);
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<int32_t> table(size_t(rows) * kv * max_pages, -1), lens(size_t(rows) * kv, 0);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < kv; ++h) {
        const size_t list = size_t(r) * kv + h;
        lens[list] = test::random_int(1, max_pages * ps);
        for (int j = 0; j < (lens[list] + ps - 1) / ps; ++j)
          table[list * max_pages + j] = int32_t((3 * step + 7 * r + j + test::random_int(0, 5)) % host_pages);
      }
    const std::vector<int32_t> written = {int32_t(step % host_pages)};
    for (int h = 0; h < kv; ++h) {  // head h's cache: lists (r, h) of every row
      std::vector<int32_t> packed_table, pages;
      for (int r = 0; r < rows; ++r) {
        const size_t list = size_t(r) * kv + h;
        packed_table.insert(packed_table.end(), table.begin() + long(list * max_pages),
                            table.begin() + long((list + 1) * max_pages));
        pages.push_back((lens[list] + ps - 1) / ps);
      }
      Step packed(rows, max_pages, packed_table, pages, written);
      const bool ok = run(packed_cache, packed, step * kv + h);
      std::vector<int32_t> slot_table(table.size(), -7), copy_page(slots, -7), copy_slot(slots, -7), counts(3, -1);
      const bool strided_ok = cpu::page_cache_map(
          {.lists = rows, .max_pages = max_pages, .table = table.data() + size_t(h) * max_pages,
           .slot_table = slot_table.data() + size_t(h) * max_pages, .list_stride = kv * max_pages,
           .list_lens = lens.data() + h, .lens_stride = kv, .page_size = ps, .slots = slots,
           .num_host_pages = host_pages, .slot_of_page = strided_cache.slot_of_page.data(),
           .page_in_slot = strided_cache.page_in_slot.data(), .last_used = strided_cache.last_used.data(),
           .step = step * kv + h, .written = written.data(), .num_written = 1, .copy_page = copy_page.data(),
           .copy_slot = copy_slot.data(), .counts = counts.data()});
      ASSERT_EQ(strided_ok, ok) << "step " << step;
      ASSERT_EQ(counts, packed.counts) << "step " << step;
      ASSERT_EQ(strided_cache.slot_of_page, packed_cache.slot_of_page) << "step " << step;
      ASSERT_EQ(strided_cache.last_used, packed_cache.last_used) << "step " << step;
      for (int i = 0; ok && i < counts[0]; ++i) {
        ASSERT_EQ(copy_page[size_t(i)], packed.copy_page[size_t(i)]);
        ASSERT_EQ(copy_slot[size_t(i)], packed.copy_slot[size_t(i)]);
      }
      for (int r = 0; ok && r < rows; ++r)
        for (int j = 0; j < pages[size_t(r)]; ++j)
          ASSERT_EQ(slot_table[(size_t(r) * kv + h) * max_pages + j], packed.slot_table[size_t(r) * max_pages + j]);
    }
  }
}

}  // namespace
}  // namespace skim
