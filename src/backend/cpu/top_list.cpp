#include "backend/cpu/top_list.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/dtype.h"

namespace skim {

float TopList::score(int i) const { return f16_to_f32(score_[size_t(i)]); }

bool TopList::below(size_t a, size_t b) const {
  const int sa = order_key(score_[a]), sb = order_key(score_[b]);
  return sa < sb || (sa == sb && index_[a] > index_[b]);
}

int TopList::admit_key() const { return full() && capacity_ > 0 ? order_key(score_[0]) : INT_MIN; }

void TopList::sift_down(size_t i) {
  const size_t n = size_t(*size_);
  for (;;) {
    size_t least = i;
    for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < n; ++c)
      if (below(c, least)) least = c;
    if (least == i) return;
    std::swap(index_[i], index_[least]);
    std::swap(score_[i], score_[least]);
    i = least;
  }
}

void TopList::sift_up(size_t i) {
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!below(i, parent)) return;
    std::swap(index_[i], index_[parent]);
    std::swap(score_[i], score_[parent]);
    i = parent;
  }
}

bool TopList::try_insert(int32_t index, float score) {
  if (capacity_ <= 0) return false;
  const uint16_t h = f32_to_f16(score);
  if (*size_ == capacity_) {
    // Compare what is stored; an equal score never displaces an earlier arrival.
    if (order_key(h) <= order_key(score_[0])) return false;
    index_[0] = index;
    score_[0] = h;
    sift_down(0);
    return true;
  }
  const size_t at = size_t((*size_)++);
  index_[at] = index;
  score_[at] = h;
  sift_up(at);
  return true;
}

std::vector<TopList::Entry> TopList::sorted() const {
  std::vector<Entry> e(static_cast<size_t>(*size_));
  for (size_t i = 0; i < e.size(); ++i) e[i] = {index_[i], f16_to_f32(score_[i])};
  std::sort(e.begin(), e.end(), [](Entry a, Entry b) { return a.score > b.score || (a.score == b.score && a.index < b.index); });
  return e;
}

void TopList::assign_sorted(const int32_t* index, const float* score, int n) {
  if (n > capacity_)
    throw std::invalid_argument("TopList: " + std::to_string(n) + " entries exceed the capacity " + std::to_string(capacity_));
  // Reversed, the entries nearly form a min-heap already; fp16 rounding can tie scores that
  // differed, so heapify to be sure.
  *size_ = n;
  for (int i = 0; i < n; ++i) {
    index_[size_t(i)] = index[n - 1 - i];
    score_[size_t(i)] = f32_to_f16(score[n - 1 - i]);
  }
  for (size_t i = size_t(n) / 2; i-- > 0;) sift_down(i);
}

}  // namespace skim
