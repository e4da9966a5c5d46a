#include "kv/page_pool.h"

#include "core/error.h"

namespace skim {

PagePool::PagePool(int num_pages, int page_size) : page_size_(page_size) {
  SKIM_REQUIRE(num_pages > 0 && page_size > 0, "KV cache: invalid pool ({} pages of {} tokens)",
               num_pages, page_size);
  free_.resize(size_t(num_pages));
  for (int i = 0; i < num_pages; ++i) free_[size_t(i)] = num_pages - 1 - i;  // pop_back gives 0 first
}

std::vector<int32_t> PagePool::reserve(PageTable& table, int new_length) {
  const int need = (new_length + page_size_ - 1) / page_size_;
  const int more = need - int(table.pages.size());
  if (more <= 0) return {};
  SKIM_REQUIRE(more <= int(free_.size()),
               "KV cache full: {} tokens need {} more pages of {} tokens, {} free (raise --ctx)",
               new_length, more, page_size_, free_.size());
  std::vector<int32_t> taken;
  for (int i = 0; i < more; ++i) {
    taken.push_back(free_.back());
    free_.pop_back();
    table.pages.push_back(taken.back());
  }
  return taken;
}

void PagePool::release(PageTable& table) {
  free_.insert(free_.end(), table.pages.begin(), table.pages.end());
  table.pages.clear();
  table.length = 0;
}

void PagePool::shrink(PageTable& table, int new_length) {
  SKIM_REQUIRE(new_length >= 0 && new_length <= table.length, "KV cache: cannot shrink {} tokens to {}",
               table.length, new_length);
  SKIM_REQUIRE(new_length % page_size_ == 0, "KV cache: shrink to {} tokens, not a multiple of the page size {}",
               new_length, page_size_);
  const size_t keep = size_t(new_length / page_size_);
  free_.insert(free_.end(), table.pages.begin() + std::ptrdiff_t(keep), table.pages.end());
  table.pages.resize(keep);
  table.length = new_length;
}

}  // namespace skim
