#include "backend/cpu/retro_decode.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "attention/attention_state.h"

namespace skim::cpu {

namespace {

int pages_of(int len, int page_size) { return (len + page_size - 1) / page_size; }

// The base list of (row b, KV head h) copied as the row's list, masks ~0u where it has none.
void copy_base(const RetroPagePlanArgs& a, int b, int h) {
  const size_t base = a.base_list(b, h), list = size_t(b) * a.num_kv_heads + h;
  const int n = pages_of(a.base_lens[base], a.page_size);
  for (int k = 0; k < n; ++k) {
    a.out_table[list * a.max_pages_per_seq + k] = a.base_table[base * a.max_pages_per_seq + k];
    a.out_masks[list * a.max_pages_per_seq + k] = a.base_masks ? a.base_masks[base * a.max_pages_per_seq + k] : ~0u;
  }
  a.out_lens[list] = a.base_lens[base];
}

// A newest row's selection in every unit: A[current page] = t-1, then each listed page's old
// value per head (into `old`) and A = t for the units that selected it.
void update_masks(const RetroPagePlanArgs& a, int b) {
  const int group = a.group_size(), len = a.seq_lens[b], t = a.retro_step[b], slot = a.row_slot[b];
  const int current = (len - 1) / a.page_size;
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  const int m = pages_of(len, a.page_size);
  if (m > a.masks.stride) throw std::invalid_argument("retro_page_plan: a mask stride too short");
  std::unordered_map<int32_t, int> index;  // page id -> its place in the row's table
  for (int i = 0; i < m; ++i) index[table[i]] = i;
  for (int h = 0; h < a.num_kv_heads; ++h) {
    const size_t list = size_t(b) * a.num_kv_heads + h;
    const int n = pages_of(a.out_lens[list], a.page_size);
    const bool per_head = a.per_head_of(b);
    for (int g = 0; g < group; ++g)  // each unit once: a group's heads share a gbsa unit
      if (per_head || g == 0) a.masks.of(slot, a.unit_of(b, h, g))[current] = t - 1;
    for (int k = 0; k < n; ++k) {
      const int i = index.at(a.out_table[list * a.max_pages_per_seq + k]);
      const uint32_t mask = a.out_masks[list * a.max_pages_per_seq + k];
      for (int g = 0; g < group; ++g)  // 0: not selected, never unseen
        a.age[(list * a.max_pages_per_seq + k) * group + g] =
            (mask >> g & 1u) ? uint8_t(std::clamp(t - a.masks.of(slot, a.unit_of(b, h, g))[i], 0, 255)) : uint8_t(0);
      for (int g = 0; g < group; ++g)
        if ((mask >> g & 1u) && (per_head || g == 0)) a.masks.of(slot, a.unit_of(b, h, g))[i] = t;
    }
  }
}

// A past row of step u: per head, its unit's pages selected now with an old value < u.
void supplements(const RetroPagePlanArgs& a, int r) {
  const int group = a.group_size(), u = a.retro_step[r], nr = a.newest_row[r], behind = a.retro_step[nr] - u;
  for (int h = 0; h < a.num_kv_heads; ++h) {
    const size_t list = size_t(r) * a.num_kv_heads + h, newest = size_t(nr) * a.num_kv_heads + h;
    const int n = pages_of(a.out_lens[newest], a.page_size);
    int listed = 0;
    for (int k = 0; k < n; ++k) {
      uint32_t mask = 0;
      for (int g = 0; g < group; ++g)
        mask |= uint32_t(a.age[(newest * a.max_pages_per_seq + k) * group + g] > behind) << g;
      if (!mask) continue;
      a.out_table[list * a.max_pages_per_seq + listed] = a.out_table[newest * a.max_pages_per_seq + k];
      a.out_masks[list * a.max_pages_per_seq + listed] = mask;
      ++listed;
    }
    a.out_lens[list] = listed * a.page_size;  // whole pages: the current page is never unseen
  }
}

}  // namespace

void retro_page_plan(const RetroPagePlanArgs& a) {
  if (a.batch < 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.group_size() > 32 ||
      a.page_size <= 0 || a.max_pages_per_seq <= 0)
    throw std::invalid_argument("retro_page_plan: bad shapes");
  for (int b = 0; b < a.batch; ++b) {
    const int len = a.seq_lens[b];
    if (len <= 0 || len > a.max_pages_per_seq * a.page_size) throw std::invalid_argument("retro_page_plan: seq_len out of range");
    const bool past = a.row_slot[b] >= 0 && a.newest_row[b] != b;
    for (int h = 0; h < a.num_kv_heads; ++h) {
      if (!past) {
        copy_base(a, b, h);
        continue;
      }
      a.out_lens[size_t(b) * a.num_kv_heads + h] = 0;  // a past row in a dense layer: nothing unseen
    }
  }
  for (int b = 0; b < a.batch; ++b)  // newest rows first: their old values feed the past rows
    if (a.row_slot[b] >= 0 && a.newest_row[b] == b && a.sparse_of(b)) update_masks(a, b);
  for (int b = 0; b < a.batch; ++b)
    if (a.row_slot[b] >= 0 && a.newest_row[b] != b && a.sparse_of(b)) supplements(a, b);
}

void retro_merge(const RetroMergeArgs& a) {
  const int d = a.head_dim, H = a.num_heads;
  for (int b = 0; b < a.batch; ++b) {
    const int slot = a.row_slot ? a.row_slot[b] : -1;
    const bool past = slot >= 0 && a.newest_row[b] != b;
    const int step = a.retro_step ? a.retro_step[b] : 0, w1 = slot < 0 ? 0 : a.entries_of(b);
    // Slots hold cache.entries entries; a row uses the first w1 of its slot's.
    const size_t entry = slot < 0 || w1 == 0 ? 0 : size_t(slot) * a.cache.entries + size_t(step % w1);
    if (past && a.cache.step[entry] != step)
      throw std::invalid_argument("retro_merge: no cached state for a past row's step");
    for (int h = 0; h < H; ++h) {
      const size_t i = size_t(b) * H + h;
      float* out = a.out + i * d;
      if (!past) {
        std::copy_n(a.o + i * d, d, out);
        if (a.out_lse) a.out_lse[i] = a.lse[i];
        if (slot >= 0 && w1 > 0) {  // the newest row's state: the cache's entry for step t
          std::copy_n(a.o + i * d, d, a.cache.o + (entry * H + h) * d);
          a.cache.lse[entry * H + h] = a.lse[i];
        }
        continue;
      }
      float* c = a.cache.o + (entry * H + h) * d;
      merge_state(c, a.cache.lse[entry * H + h], a.o + i * d, a.lse[i], d);
      std::copy_n(c, d, out);
      if (a.out_lse) a.out_lse[i] = a.cache.lse[entry * H + h];
    }
    if (slot >= 0 && !past && w1 > 0) a.cache.step[entry] = step;
  }
}

}  // namespace skim::cpu
