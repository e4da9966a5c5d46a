#include "eval/selection_locality.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace skim::eval {

void LocalityStats::merge(const LocalityStats& o) {
  for (double LocalityStats::*f : {&LocalityStats::lists, &LocalityStats::keys, &LocalityStats::pages,
                                   &LocalityStats::page_keys, &LocalityStats::context_pages, &LocalityStats::repeats,
                                   &LocalityStats::overlap})
    this->*f += o.*f;
  for (size_t i = 0; i < hits.size(); ++i) hits[i] += o.hits[i], lookups[i] += o.lookups[i];
}

bool SelectionLocalityMeter::Cache::touch(int page, uint64_t step) {
  auto it = last_use.find(page);
  if (it != last_use.end()) {
    it->second = step;
    return true;
  }
  if (last_use.size() >= capacity && !last_use.empty()) {  // evict the least recently used
    auto lru = std::min_element(last_use.begin(), last_use.end(),
                                [](const auto& a, const auto& b) { return a.second < b.second; });
    last_use.erase(lru);
  }
  if (capacity > 0) last_use.emplace(page, step);
  return false;
}

void SelectionLocalityMeter::attach(AttentionPolicy& policy) {
  policy.set_selection_observer([this](const AttentionBatch& b, int row, int kv_head,
                                       const std::vector<std::vector<KeyRange>>& heads) {
    on_selection(b, row, kv_head, heads);
  });
}

void SelectionLocalityMeter::detach(AttentionPolicy& policy) { policy.set_selection_observer({}); }

void SelectionLocalityMeter::on_selection(const AttentionBatch& b, int row, int kv_head,
                                          const std::vector<std::vector<KeyRange>>& heads) {
  const int ps = b.kv.page_size, context = b.positions[row] + 1;
  std::vector<KeyRange> all;
  for (const auto& h : heads) all.insert(all.end(), h.begin(), h.end());
  std::vector<int> pages;
  uint64_t keys = 0;
  for (KeyRange r : coalesce_ranges(std::move(all))) {
    keys += uint64_t(r.end - r.begin);
    for (int p = r.begin / ps; p * ps < r.end; ++p)
      if (pages.empty() || pages.back() != p) pages.push_back(p);
  }
  List& l = lists_[{b.tables[row], b.layer, kv_head}];
  stats_.lists += 1;
  stats_.keys += double(keys);
  stats_.pages += double(pages.size());
  stats_.page_keys += double(pages.size()) * ps;
  stats_.context_pages += double((context + ps - 1) / ps);
  if (l.steps == 0)
    for (size_t i = 0; i < l.caches.size(); ++i)
      l.caches[i].capacity = size_t(std::ceil(kLocalityCacheSizes[i] * double(pages.size())));
  if (l.steps > 0 && !pages.empty()) {  // the first step is the cold start of every cache
    std::vector<int> common;
    std::set_intersection(pages.begin(), pages.end(), l.pages.begin(), l.pages.end(), std::back_inserter(common));
    stats_.repeats += 1;
    stats_.overlap += double(common.size()) / double(pages.size());
  }
  for (size_t i = 0; i < l.caches.size(); ++i)
    for (int p : pages) {
      const bool hit = l.caches[i].touch(p, l.steps);
      if (l.steps > 0) {
        stats_.lookups[i] += 1;
        stats_.hits[i] += hit ? 1.0 : 0.0;
      }
    }
  l.pages = std::move(pages);
  l.steps += 1;
}

}  // namespace skim::eval
