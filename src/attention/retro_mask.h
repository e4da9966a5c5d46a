// RetroAttention's retrospective mask for one selection unit (a query head for Quest, a KV
// group for ReSA's block selection): A[p] = the last decode step in which page p was loaded.
// Algorithm 2 of seeds/000 (Appendix C): before selecting at step t, A[current page] = t-1 so
// that earlier queries do not attend the page being filled; for each selected page the value
// returned is the old A[p], then A[p] = t. A past query of step u (t-w < u < t) reads a selected
// page only if its returned value is < u: the page was loaded by no query in [u, t-1], which is
// the set difference S_t \ (S_u u ... u S_{t-1}) of the paper's equation (7).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace skim {

class RetroMask {
 public:
  static constexpr int32_t kNever = -1;  // steps count from 0

  // Step t's update; `values` gets one entry per page of `selected`, in its order.
  void update(int32_t step, int current_page, std::span<const int> selected, std::vector<int32_t>& values) {
    grow(current_page);
    a_[size_t(current_page)] = step - 1;
    values.clear();
    for (int p : selected) {
      grow(p);
      values.push_back(a_[size_t(p)]);
      a_[size_t(p)] = step;
    }
  }
  int32_t value(int page) const { return size_t(page) < a_.size() ? a_[size_t(page)] : kNever; }
  size_t pages() const { return a_.size(); }

 private:
  void grow(int page) {
    if (size_t(page) >= a_.size()) a_.resize(size_t(page) + 1, kNever);
  }
  std::vector<int32_t> a_;
};

}  // namespace skim
