#include "backend/cpu/top_list.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/dtype.h"

namespace skim {

float TopList::score(int i) const { return f16_to_f32(score_[size_t(i)]); }

int TopList::admit_key() const { return heap().admit_key(); }

bool TopList::try_insert(int32_t index, float score) { return heap().offer(index, f32_to_f16(score)); }

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
  for (size_t i = size_t(n) / 2; i-- > 0;) heap().sift_down(i);
}

}  // namespace skim
