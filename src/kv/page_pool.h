// The pool of KV page ids and each sequence's claim on it: which pages are free, and growing
// or returning a sequence's page table. Shared by the CPU cache and the GPU cache, which
// differ only in where the pages' contents live.
#pragma once

#include <cstdint>
#include <vector>

namespace skim {

// Where one sequence's tokens live.
struct PageTable {
  std::vector<int32_t> pages;
  int length = 0;  // tokens written (positions [0, length))
};

class PagePool {
 public:
  PagePool(int num_pages, int page_size);

  int free_pages() const { return int(free_.size()); }
  int page_size() const { return page_size_; }

  // Grows `table` so it can hold `new_length` tokens and returns the pages it took (in
  // table order); throws skim::Error when the pool is full.
  std::vector<int32_t> reserve(PageTable& table, int new_length);
  // Returns the table's pages to the pool and empties it.
  void release(PageTable& table);
  // Keeps the table's first `new_length` tokens (<= its length, a multiple of the page size, so
  // every kept page's digest covers exactly its kept keys in either cache) and returns the
  // pages past them to the pool.
  void shrink(PageTable& table, int new_length);

 private:
  int page_size_;
  std::vector<int32_t> free_;
};

}  // namespace skim
