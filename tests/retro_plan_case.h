// A RetroAttention decode batch for the plan tests (GPU against the CPU reference): a few
// sequences, each with its past rows then its newest row, over shuffled page tables; a base plan
// for every row (quest-like: per (row, KV head) a random subset of the row's pages with the
// newest kept and random per-head masks); random masks A in their slots (loaded at random earlier
// steps or never); one row of another policy (slot -1). No gtest here.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/retro_decode_args.h"
#include "shuffled_pages.h"
#include "test_random.h"

namespace skim::test {

struct RetroPlanCase {
  int page_size = 16, kv_heads, group, stride_pages;
  std::vector<int> lens;
  std::vector<int32_t> row_slot, retro_step, newest_row, base_table, base_lens, a;
  std::vector<uint32_t> base_masks;
  ShuffledPages pages;

  RetroPlanCase(int hkv, int g, int sequences, int w) : kv_heads(hkv), group(g) {
    for (int s = 0; s < sequences; ++s) {
      const int len = random_int(40, 1500), t = random_int(w, 40), past = w - 1;
      for (int j = past; j >= 0; --j) {  // oldest first, the newest last
        lens.push_back(len - j);
        row_slot.push_back(s);
        retro_step.push_back(t - j);
        newest_row.push_back(int(lens.size()) - 1 + j);
      }
    }
    lens.push_back(random_int(1, 700));  // a row of another policy
    row_slot.push_back(-1);
    retro_step.push_back(0);
    newest_row.push_back(int(lens.size()) - 1);
    // Rows of a sequence share its pages: the table of its longest (newest) row.
    std::vector<int> table_lens;
    for (size_t r = 0; r < lens.size(); ++r) table_lens.push_back(lens[size_t(newest_row[r])]);
    pages = shuffled_pages(table_lens, page_size, 2, 1, rng());
    for (size_t r = 0; r < lens.size(); ++r)  // one page table per sequence
      for (int i = 0; i < pages.stride; ++i)
        pages.table[r * pages.stride + i] = pages.table[size_t(newest_row[r]) * pages.stride + i];
    stride_pages = pages.stride;
    base_table.assign(size_t(batch()) * hkv * pages.stride, -7);
    base_lens.assign(size_t(batch()) * hkv, 0);
    base_masks.assign(base_table.size(), 0u);
    for (int b = 0; b < batch(); ++b)
      for (int h = 0; h < hkv; ++h) {
        const size_t list = size_t(b) * hkv + h;
        const int m = (lens[size_t(b)] + page_size - 1) / page_size;
        int n = 0;
        for (int i = 0; i < m; ++i) {
          const uint32_t mask = i + 1 == m ? (1u << g) - 1 : uint32_t(random_int(0, (1 << g) - 1));
          if (!mask) continue;
          base_table[list * pages.stride + n] = pages.table[size_t(b) * pages.stride + i];
          base_masks[list * pages.stride + n] = mask;
          base_lens[list] += i + 1 < m ? page_size : lens[size_t(b)] - i * page_size;
          ++n;
        }
      }
    a.assign(size_t(sequences) * hkv * g * pages.stride, kRetroNever);
    for (int32_t& x : a) x = random_int(0, 2) ? random_int(-1, 38) : kRetroNever;
  }
  int batch() const { return int(lens.size()); }
  size_t slots() const { return size_t(batch()) * kv_heads * pages.stride; }
  RetroPagePlanArgs args() const {
    return {.batch = batch(), .num_heads = kv_heads * group, .num_kv_heads = kv_heads, .page_size = page_size,
            .max_pages_per_seq = pages.stride, .per_head_units = true, .sparse = true};
  }
};

}  // namespace skim::test
