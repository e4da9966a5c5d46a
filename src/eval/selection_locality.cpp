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
  for (size_t g = 0; g < ahead_lists.size(); ++g) {
    ahead_lists[g] += o.ahead_lists[g];
    ahead_misses[g] += o.ahead_misses[g];
    ahead_copied[g] += o.ahead_copied[g];
    ahead_useful[g] += o.ahead_useful[g];
  }
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
  policy.set_speculation_observer([this](const AttentionBatch& b, int row, int kv_head,
                                         const std::vector<std::vector<KeyRange>>& heads) {
    on_speculation(b, row, kv_head, heads);
  });
}

void SelectionLocalityMeter::detach(AttentionPolicy& policy) {
  policy.set_selection_observer({});
  policy.set_speculation_observer({});
}

namespace {

// The pages holding the union of the units' keys, ascending; `keys` gets the union's size.
std::vector<int> pages_of(const std::vector<std::vector<KeyRange>>& heads, int ps, uint64_t& keys) {
  std::vector<KeyRange> all;
  for (const auto& h : heads) all.insert(all.end(), h.begin(), h.end());
  std::vector<int> pages;
  keys = 0;
  for (KeyRange r : coalesce_ranges(std::move(all))) {
    keys += uint64_t(r.end - r.begin);
    for (int p = r.begin / ps; p * ps < r.end; ++p)
      if (pages.empty() || pages.back() != p) pages.push_back(p);
  }
  return pages;
}

}  // namespace

void SelectionLocalityMeter::on_speculation(const AttentionBatch& b, int row, int kv_head,
                                            const std::vector<std::vector<KeyRange>>& heads) {
  uint64_t keys = 0;
  const auto key = std::make_tuple(b.tables[row], b.layer, kv_head);
  const auto list = lists_.find(key);
  const uint64_t step = list == lists_.end() ? 0 : list->second.steps;
  Guess& g = guesses_[key];
  if (g.step != step) g = Guess{{}, step};  // an earlier step's guesses are stale
  g.pages.push_back(pages_of(heads, b.kv.page_size, keys));
}

void SelectionLocalityMeter::on_selection(const AttentionBatch& b, int row, int kv_head,
                                          const std::vector<std::vector<KeyRange>>& heads) {
  const int ps = b.kv.page_size, context = b.positions[row] + 1;
  uint64_t keys = 0;
  std::vector<int> pages = pages_of(heads, ps, keys);
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
  std::vector<int> same, any;
  if (l.steps > 0 && guesses_from_layer_before(b.tables[row], b.layer, kv_head, b.num_kv_heads, l, same, any)) {
    count_ahead(l, pages, 0, same);
    count_ahead(l, pages, 1, any);
  }
  const auto guess = guesses_.find({b.tables[row], b.layer, kv_head});
  if (l.steps > 0 && guess != guesses_.end() && guess->second.step == l.steps)
    for (size_t k = 0; k < guess->second.pages.size() && 2 + k < kAheadGuesses.size(); ++k)
      count_ahead(l, pages, 2 + k, guess->second.pages[k]);
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

bool SelectionLocalityMeter::guesses_from_layer_before(const PageTable* table, int layer, int kv_head,
                                                       int num_kv_heads, const List& l, std::vector<int>& same,
                                                       std::vector<int>& any) const {
  // The layer before chose in this step when its count is one ahead of this list's (counts
  // advance after each choice).
  const auto chose_now = [&](int head) -> const List* {
    const auto it = lists_.find({table, layer - 1, head});
    return it != lists_.end() && it->second.steps == l.steps + 1 ? &it->second : nullptr;
  };
  const List* before = chose_now(kv_head);
  if (layer == 0 || !before) return false;
  same = before->pages;
  for (int h = 0; h < std::max(num_kv_heads, kv_head + 1); ++h)
    if (const List* other = chose_now(h)) {
      std::vector<int> merged;
      std::set_union(any.begin(), any.end(), other->pages.begin(), other->pages.end(), std::back_inserter(merged));
      any = std::move(merged);
    }
  return true;
}

void SelectionLocalityMeter::count_ahead(const List& l, const std::vector<int>& pages, size_t guess,
                                         const std::vector<int>& guessed) {
  const Cache& cache = l.caches.back();  // the largest: what a host-KV cache would be sized
  const auto resident = [&](int p) { return cache.last_use.count(p) > 0; };
  stats_.ahead_lists[guess] += 1;
  for (int p : pages) stats_.ahead_misses[guess] += resident(p) ? 0.0 : 1.0;
  for (int p : guessed) {
    if (resident(p)) continue;  // already here: nothing to copy
    stats_.ahead_copied[guess] += 1;
    if (std::binary_search(pages.begin(), pages.end(), p)) stats_.ahead_useful[guess] += 1;
  }
}

}  // namespace skim::eval
