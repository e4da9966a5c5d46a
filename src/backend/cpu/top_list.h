// CSAttention's centroid lists (attention/csattn.h): a bounded list of the best-scored keys,
// what the table build fills, the streaming insert updates and the search reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/top_list_heap.h"

namespace skim {

// A bounded list of (key index, score): the `capacity` largest scores offered. A new entry
// replaces the minimum only when its score is larger. Stored as a binary min-heap (the minimum
// at the root: attention/top_list_heap.h, which the device insert shares), so an insert costs
// O(log L) and no shifting; the gather reads every entry and needs no order. Among equal
// scores the later arrival (the larger key index) counts as smaller: it is the one evicted, as
// a list sorted with ties in arrival order would drop it.
// A view of storage it does not own: `capacity` slots of key index and fp16 score and the
// count in use, as a group's tables hold every list of theirs in one flat layout (CsGroupTables),
// the layout a device copy of the tables would have too.
class TopList {
 public:
  struct Entry {
    int32_t index;
    float score;
  };
  TopList(int32_t* index, uint16_t* score, int32_t* size, int capacity)
      : index_(index), score_(score), size_(size), capacity_(capacity) {}
  // Returns whether the entry went in.
  bool try_insert(int32_t index, float score);
  // Fills the list from n <= capacity entries already sorted by descending score (the build).
  void assign_sorted(const int32_t* index, const float* score, int n);
  int size() const { return *size_; }
  int capacity() const { return capacity_; }
  // Entry i in storage (heap) order.
  int32_t index(int i) const { return index_[size_t(i)]; }
  float score(int i) const;
  float min_score() const { return score(0); }  // size() > 0
  bool full() const { return size() == capacity_; }
  // A score's rank as an integer: fp16 bits ordered as their values (finite scores), so
  // comparisons need no conversion.
  static int order_key(uint16_t h) { return top_list::order_key(h); }
  // What a new score's order key must exceed to go in: the minimum's when full, else INT_MIN.
  int admit_key() const;
  // The entries by descending score, ties by index (for tests and reports).
  std::vector<Entry> sorted() const;
  static constexpr size_t kEntryBytes = top_list::kEntryBytes;

 private:
  top_list::Heap heap() const { return {index_, score_, size_, capacity_}; }
  int32_t* index_;
  uint16_t* score_;  // fp16
  int32_t* size_;
  int capacity_;
};

// One list with storage of its own (tests, tools).
struct TopListStorage {
  explicit TopListStorage(int capacity)
      : index(static_cast<size_t>(capacity)), score(static_cast<size_t>(capacity)), capacity(capacity) {}
  TopList list() { return TopList(index.data(), score.data(), &size, capacity); }
  std::vector<int32_t> index;
  std::vector<uint16_t> score;
  int32_t size = 0;
  int capacity;
};

}  // namespace skim
