#include <numeric>
#include <vector>

#include "backend/cpu/attend.h"
#include "backend/cpu/page_digest.h"

namespace skim {

std::vector<int> top_pages(const std::vector<float>& scores, int n, int forced) {
  const int count = int(scores.size());
  std::vector<int> idx(static_cast<size_t>(count));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int a, int b) {
    if (a == forced || b == forced) return a == forced && b != forced;
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  n = std::min(n, count);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), better);
  idx.resize(size_t(n));
  return idx;
}

std::vector<KeyRange> page_ranges(const std::vector<int>& pages, int page_size, int context) {
  std::vector<KeyRange> r;
  r.reserve(pages.size());
  for (int p : pages) r.push_back({p * page_size, std::min(context, (p + 1) * page_size)});
  return r;
}

}  // namespace skim
