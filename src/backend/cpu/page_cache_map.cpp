#include "backend/cpu/page_cache_map.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace skim::cpu {

bool page_cache_map(const PageCacheArgs& a) {
  auto check = [&](int32_t p) {
    if (p < 0 || p >= a.num_host_pages) throw std::invalid_argument("page_cache_map: a page id outside the host pool");
  };
  // The step's distinct pages, ascending.
  std::vector<int32_t> pages;
  if (!a.list_pages && (!a.list_lens || a.page_size <= 0))
    throw std::invalid_argument("page_cache_map: list_pages, or list_lens with a page size");
  for (int i = 0; i < a.lists; ++i)
    for (int j = 0; j < a.pages_in(i); ++j) {
      const int32_t p = a.table[a.list_at(i) + size_t(j)];
      check(p);
      pages.push_back(p);
    }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  a.counts[0] = a.counts[1] = a.counts[2] = 0;
  if (int(pages.size()) > a.slots) {
    a.counts[2] = 1;
    return false;
  }

  // 1. Written pages leave the cache.
  for (int w = 0; w < a.num_written; ++w) {
    const int32_t p = a.written[w];
    check(p);
    if (const int32_t s = a.slot_of_page[p]; s >= 0) {
      a.slot_of_page[p] = -1;
      a.page_in_slot[s] = -1;
      a.last_used[s] = -1;
    }
  }
  // 2. Hits are stamped; 3. misses take the least recently used unstamped slots. A prefetch
  // stamps as the step before, and copies only the misses that slots older than that hold.
  const int64_t stamp = a.prefetch ? a.step - 1 : a.step;
  std::vector<int32_t> misses;
  for (int32_t p : pages)
    if (const int32_t s = a.slot_of_page[p]; s >= 0) {
      a.last_used[s] = stamp;
      a.counts[1] += 1;
    } else {
      misses.push_back(p);
    }
  std::vector<int32_t> victims;
  for (int32_t s = 0; s < a.slots; ++s)
    if (a.last_used[s] < stamp) victims.push_back(s);
  if (misses.size() > victims.size()) misses.resize(victims.size());  // a prefetch only: the step's own always fit
  auto older = [&](int32_t x, int32_t y) {  // least recently used first, ties to the lower slot
    return a.last_used[x] < a.last_used[y] || (a.last_used[x] == a.last_used[y] && x < y);
  };
  std::partial_sort(victims.begin(), victims.begin() + std::ptrdiff_t(misses.size()), victims.end(), older);
  victims.resize(misses.size());
  std::sort(victims.begin(), victims.end());
  for (size_t i = 0; i < misses.size(); ++i) {
    const int32_t s = victims[i], p = misses[i];
    if (a.page_in_slot[s] >= 0) a.slot_of_page[a.page_in_slot[s]] = -1;
    a.page_in_slot[s] = p;
    a.slot_of_page[p] = s;
    a.last_used[s] = stamp;
    a.copy_page[i] = p;
    a.copy_slot[i] = s;
  }
  a.counts[0] = int32_t(misses.size());
  // 4. The lists as slots.
  if (a.prefetch) return true;
  for (int i = 0; i < a.lists; ++i)
    for (int j = 0; j < a.pages_in(i); ++j) {
      a.slot_table[a.slot_at(i) + size_t(j)] = a.slot_of_page[a.table[a.list_at(i) + size_t(j)]];
    }
  return true;
}

}  // namespace skim::cpu
