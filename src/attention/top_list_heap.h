// The bounded min-heap of CSAttention's centroid lists (backend/cpu/top_list.h: TopList), as
// functions over a list's raw storage that run on the host and in CUDA kernels, so the CPU's
// streaming insert and the device's (backend/cuda/cs_insert.cu) make the same heap. A list:
// `capacity` slots of key index and fp16 score (bits) and its size; the minimum at the root;
// among equal scores the larger key index ranks lower (the later arrival is the one evicted).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace skim::top_list {

// Bytes of one list entry: a key index and an fp16 score.
constexpr uint64_t kEntryBytes = sizeof(int32_t) + sizeof(uint16_t);

// A score's rank as an integer: fp16 bits ordered as their values (finite scores).
SKIM_HOST_DEVICE inline int order_key(uint16_t h) { return (h & 0x8000u) ? -int(h & 0x7fffu) : int(h); }

struct Heap {
  int32_t* index;
  uint16_t* score;
  int32_t* size;
  int capacity;

  // Entry a ranks under entry b.
  SKIM_HOST_DEVICE bool below(size_t a, size_t b) const {
    const int sa = order_key(score[a]), sb = order_key(score[b]);
    return sa < sb || (sa == sb && index[a] > index[b]);
  }
  SKIM_HOST_DEVICE void swap(size_t a, size_t b) const {
    const int32_t i = index[a];
    index[a] = index[b], index[b] = i;
    const uint16_t s = score[a];
    score[a] = score[b], score[b] = s;
  }
  // Entry (sa: order key, ia: index) ranks under entry (sb, ib).
  SKIM_HOST_DEVICE static bool below(int sa, int32_t ia, int sb, int32_t ib) {
    return sa < sb || (sa == sb && ia > ib);
  }
  // Moves the entry at i down to its place. The moving entry stays in registers and each child
  // that ranks under it moves up into the hole: a level costs one round of loads (both children's
  // scores and indices together) where swapping re-read what it had just written (the device's
  // insert waits on every level: cs_insert.cu). The same moves as swapping, so the same heap.
  SKIM_HOST_DEVICE void sift_down(size_t i) const {
    const size_t n = size_t(*size);
    const int32_t key = index[i];
    const int ks = order_key(score[i]);
    const uint16_t h = score[i];
    for (;;) {
      const size_t c1 = 2 * i + 1, c2 = c1 + 1;
      if (c1 >= n) break;
      const uint16_t h1 = score[c1];
      const int32_t i1 = index[c1];
      const bool two = c2 < n;
      const uint16_t h2 = two ? score[c2] : 0;
      const int32_t i2 = two ? index[c2] : 0;
      // The least of (moving, c1, c2), compared in that order as swapping compares them.
      size_t least = i;
      int ls = ks;
      int32_t li = key;
      uint16_t lh = h;
      if (below(order_key(h1), i1, ls, li)) least = c1, ls = order_key(h1), li = i1, lh = h1;
      if (two && below(order_key(h2), i2, ls, li)) least = c2, ls = order_key(h2), li = i2, lh = h2;
      if (least == i) break;
      index[i] = li, score[i] = lh;
      i = least;
    }
    index[i] = key, score[i] = h;
  }
  SKIM_HOST_DEVICE void sift_up(size_t i) const {
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!below(i, parent)) return;
      swap(i, parent);
      i = parent;
    }
  }
  // What a new score's order key must exceed to go in: the minimum's when full, else INT_MIN.
  SKIM_HOST_DEVICE int admit_key() const {
    return *size == capacity && capacity > 0 ? order_key(score[0]) : -2147483647 - 1;
  }
  // Offers (key, fp16 score bits): in when the list has room or the score beats the minimum (an
  // equal score never displaces an earlier arrival). Returns whether it went in.
  SKIM_HOST_DEVICE bool offer(int32_t key, uint16_t h) const {
    if (capacity <= 0) return false;
    if (*size == capacity) {
      if (order_key(h) <= order_key(score[0])) return false;
      index[0] = key, score[0] = h;
      sift_down(0);
      return true;
    }
    const size_t at = size_t((*size)++);
    index[at] = key, score[at] = h;
    sift_up(at);
    return true;
  }
};

}  // namespace skim::top_list
