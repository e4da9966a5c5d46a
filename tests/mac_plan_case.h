// A decode batch for MAC's page plan (attention/mac_decode_args.h), for the plan tests (CPU:
// tests/attention/mac_decode_test.cpp, against the definition; GPU: against the CPU): shuffled
// page tables, a base plan (per row or per (row, KV head), with or without per-head masks)
// keeping a random subset of each row's pages in position order, the newest always, and per
// query head a hit with a random page-aligned band start or a miss. Pointers are left for the
// caller to fill (host or device). No gtest here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/mac_decode_args.h"
#include "shuffled_pages.h"
#include "test_random.h"

namespace skim::test {

struct MacPlanCase {
  int page_size = 16, kv_heads, group, band;
  bool per_kv_head, masked;
  std::vector<int> lens;
  ShuffledPages pages;
  std::vector<int32_t> base_table, base_lens, band_begin;
  std::vector<uint32_t> base_masks;

  MacPlanCase(int hkv, int g, int r, bool per_head, bool with_masks, std::vector<int> seq_lens)
      : kv_heads(hkv), group(g), band(r), per_kv_head(per_head || with_masks), masked(with_masks),
        lens(std::move(seq_lens)) {
    pages = shuffled_pages(lens, page_size, 2, 1, rng());
    const int lists = batch() * (per_kv_head ? kv_heads : 1);
    base_table.assign(size_t(lists) * pages.stride, -7);
    base_lens.assign(size_t(lists), 0);
    if (masked) base_masks.assign(base_table.size(), 0u);
    for (int b = 0; b < batch(); ++b)
      for (int l = 0; l < (per_kv_head ? kv_heads : 1); ++l) {
        const size_t list = size_t(b) * (per_kv_head ? kv_heads : 1) + l;
        const int m = pages.pages_of(lens[size_t(b)], page_size);
        int n = 0;
        for (int i = 0; i < m; ++i) {
          const uint32_t mask = masked ? uint32_t(random_int(0, (1 << group) - 1)) : ~0u;
          if (i + 1 < m && (random_int(0, 2) == 0 || mask == 0)) continue;  // the newest page stays
          base_table[list * pages.stride + n] = pages.table[size_t(b) * pages.stride + i];
          if (masked) base_masks[list * pages.stride + n] = i + 1 < m ? mask : (1u << group) - 1;
          base_lens[list] += i + 1 < m ? page_size : lens[size_t(b)] - i * page_size;
          ++n;
        }
      }
    band_begin.assign(size_t(batch()) * heads(), -1);
    for (int b = 0; b < batch(); ++b)
      for (int h = 0; h < heads(); ++h)
        if (random_int(0, 1)) {
          const int m = pages.pages_of(lens[size_t(b)], page_size);
          band_begin[size_t(b) * heads() + h] = random_int(0, m - 1) * page_size;
        }
  }
  // The base lists in a random order of their entries (mac+art: ART's visiting plan).
  void shuffle_base() {
    for (size_t list = 0; list < base_lens.size(); ++list) {
      const int n = pages.pages_of(base_lens[list], page_size);
      std::vector<int> perm(static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) perm[size_t(j)] = j;
      std::shuffle(perm.begin(), perm.end(), rng());
      std::vector<int32_t> t(static_cast<size_t>(n));
      std::vector<uint32_t> m(static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) {
        t[size_t(j)] = base_table[list * pages.stride + perm[size_t(j)]];
        if (masked) m[size_t(j)] = base_masks[list * pages.stride + perm[size_t(j)]];
      }
      for (int j = 0; j < n; ++j) {
        base_table[list * pages.stride + j] = t[size_t(j)];
        if (masked) base_masks[list * pages.stride + j] = m[size_t(j)];
      }
    }
  }
  int batch() const { return int(lens.size()); }
  int heads() const { return kv_heads * group; }
  size_t slots() const { return size_t(batch()) * kv_heads * pages.stride; }
  size_t lists() const { return size_t(batch()) * kv_heads; }

  MacPagePlanArgs args() const {
    return {.batch = batch(), .num_heads = heads(), .num_kv_heads = kv_heads, .page_size = page_size,
            .max_pages_per_seq = pages.stride, .band = band, .base_per_kv_head = per_kv_head};
  }
};

}  // namespace skim::test
