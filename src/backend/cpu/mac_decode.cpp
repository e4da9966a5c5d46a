#include "backend/cpu/mac_decode.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "backend/cpu/attention_state.h"

namespace skim::cpu {

namespace {

// One output list being written: its pages, masks and tokens.
struct ListOut {
  int32_t* table;
  uint32_t* masks;
  int32_t* len;
  int n = 0;

  void add(int32_t page, uint32_t mask, int tokens) {
    table[n] = page;
    masks[n] = mask;
    ++n;
    *len += tokens;
  }
};

// The base plan's mask of each of the row's pages, by position: 0 for a page the base list
// leaves out. The list must be the row's pages in position order, some left out.
void base_masks_by_position(const MacPagePlanArgs& a, int b, int h, int m, uint32_t* out) {
  const size_t list = a.base_list(b, h);
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  const int32_t* base = a.base_table + list * a.max_pages_per_seq;
  const int n = (a.base_lens[list] + a.page_size - 1) / a.page_size;
  int j = 0;
  for (int i = 0; i < m; ++i) {
    out[i] = 0;
    if (j < n && base[j] == table[i]) {
      out[i] = a.base_masks ? a.base_masks[list * a.max_pages_per_seq + j] : ~0u;
      ++j;
    }
  }
  if (j != n) throw std::invalid_argument("mac_page_plan: a base list is not its row's pages in position order");
}

}  // namespace

void mac_page_plan(const MacPagePlanArgs& a) {
  const int group = a.group_size();
  if (a.batch < 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || group > 32 ||
      a.page_size <= 0 || a.max_pages_per_seq <= 0 || a.band < 0)
    throw std::invalid_argument("mac_page_plan: bad shapes or parameters");
  std::vector<uint32_t> base(static_cast<size_t>(a.max_pages_per_seq));
  for (int b = 0; b < a.batch; ++b) {
    if (!a.rows.has(b)) continue;
    const int len = a.seq_lens[b];
    if (len <= 0 || len > a.max_pages_per_seq * a.page_size)
      throw std::invalid_argument("mac_page_plan: seq_len out of range");
    const int m = (len + a.page_size - 1) / a.page_size;
    const int split_page = mac_prefix_end(len - 1, a.band, a.page_size) / a.page_size;
    const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
    for (int h = 0; h < a.num_kv_heads; ++h) {
      // Per head of the group: a hit's first page of its band+tail, or -1 (the base's pages).
      int hit_page[32];
      for (int g = 0; g < group; ++g) {
        const int begin = a.band_begin[size_t(b) * a.num_heads + h * group + g];
        if (begin >= 0 && (begin % a.page_size != 0 || begin >= len))
          throw std::invalid_argument("mac_page_plan: a band start off a page boundary or past the row");
        hit_page[g] = begin < 0 ? -1 : begin / a.page_size;
      }
      base_masks_by_position(a, b, h, m, base.data());
      const size_t list = size_t(b) * a.num_kv_heads + h;
      const size_t at = list * a.max_pages_per_seq;
      a.below_lens[list] = a.above_lens[list] = 0;
      ListOut below{a.below_table + at, a.below_masks + at, a.below_lens + list};
      ListOut above{a.above_table + at, a.above_masks + at, a.above_lens + list};
      for (int i = 0; i < m; ++i) {
        uint32_t mask = 0;
        for (int g = 0; g < group; ++g) {
          const bool attends = hit_page[g] >= 0 ? i >= hit_page[g] : (base[size_t(i)] >> g & 1u) != 0;
          mask |= uint32_t(attends) << g;
        }
        if (mask == 0) continue;
        const int tokens = i + 1 < m ? a.page_size : len - i * a.page_size;
        (i < split_page ? below : above).add(table[i], mask, tokens);
      }
    }
  }
}

void mac_merge_states(const MacMergeArgs& a) {
  const int d = a.head_dim;
  for (size_t i = 0; i < size_t(a.batch) * a.num_heads; ++i) {
    float* cache = a.cache_o + i * d;
    merge_state(cache, a.cache_lse[i], a.below_o + i * d, a.below_lse[i], d);
    float* out = a.out + i * d;
    float lse = a.cache_lse[i];
    std::copy_n(cache, d, out);
    merge_state(out, lse, a.above_o + i * d, a.above_lse[i], d);
  }
}

}  // namespace skim::cpu
