// Page tables for paged-attention tests: each sequence's pages drawn from a shuffled pool (as
// in a long-running server), a few spare pages nobody owns, and slack slots in every table row
// holding an out-of-range id, so a kernel that reads past a sequence's pages is caught.
// No gtest here: the gtest-free GPU parity driver includes it too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace skim::test {

struct ShuffledPages {
  std::vector<int32_t> table;  // [batch][stride]: page i of sequence b at b * stride + i
  int stride = 0;              // the longest sequence's pages + slack
  int num_pages = 0;           // pool size: the sequences' pages + spare
  int pages_of(int len, int page_size) const { return (len + page_size - 1) / page_size; }
};

inline ShuffledPages shuffled_pages(const std::vector<int>& lens, int page_size, int spare, int slack,
                                    std::mt19937_64& rng) {
  ShuffledPages s;
  int total = 0, max_pages = 1;
  for (int len : lens) {
    total += s.pages_of(len, page_size);
    max_pages = std::max(max_pages, s.pages_of(len, page_size));
  }
  s.num_pages = total + spare;
  s.stride = max_pages + slack;
  std::vector<int32_t> perm(s.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  s.table.assign(lens.size() * size_t(s.stride), std::numeric_limits<int32_t>::max());
  int next = 0;
  for (size_t b = 0; b < lens.size(); ++b)
    for (int i = 0; i < s.pages_of(lens[b], page_size); ++i) s.table[b * s.stride + i] = perm[next++];
  return s;
}

}  // namespace skim::test
