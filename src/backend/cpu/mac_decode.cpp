#include "backend/cpu/mac_decode.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "attention/attention_state.h"
#include "core/dtype.h"

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

// The row's m pages as (page id, position), sorted by id: what base_masks_any_order looks a
// base entry up in (made once per row, for all its KV heads).
void positions_by_id(const MacPagePlanArgs& a, int b, int m, std::vector<std::pair<int32_t, int>>& position) {
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  position.resize(size_t(m));
  for (int i = 0; i < m; ++i) position[size_t(i)] = {table[i], i};
  std::sort(position.begin(), position.end());
}

// The base plan's mask of each of the row's pages, by position, for a base list in any order
// (mac+art: ART's visiting plan), and each base entry's position in `order` (a page the row does
// not hold is refused). position: positions_by_id's.
void base_masks_any_order(const MacPagePlanArgs& a, int b, int h, int m,
                          const std::vector<std::pair<int32_t, int>>& position, uint32_t* out, std::vector<int>& order) {
  const size_t list = a.base_list(b, h);
  const int32_t* base = a.base_table + list * a.max_pages_per_seq;
  const int n = (a.base_lens[list] + a.page_size - 1) / a.page_size;
  std::fill(out, out + m, 0u);
  order.assign(size_t(n), -1);
  for (int j = 0; j < n; ++j) {
    const auto it = std::lower_bound(position.begin(), position.end(), std::pair<int32_t, int>{base[j], -1});
    if (it == position.end() || it->first != base[j])
      throw std::invalid_argument("mac_page_plan: a base list holds a page its row does not");
    order[size_t(j)] = it->second;
    out[it->second] = a.base_masks ? a.base_masks[list * a.max_pages_per_seq + j] : ~0u;
  }
}

// A row of another policy: its base list whole as `above`, nothing below.
void pass_through(const MacPagePlanArgs& a, int b) {
  for (int h = 0; h < a.num_kv_heads; ++h) {
    const size_t list = size_t(b) * a.num_kv_heads + h, base = a.base_list(b, h);
    const int n = (a.base_lens[base] + a.page_size - 1) / a.page_size;
    for (int j = 0; j < n; ++j) {
      a.above_table[list * a.max_pages_per_seq + j] = a.base_table[base * a.max_pages_per_seq + j];
      a.above_masks[list * a.max_pages_per_seq + j] = a.base_masks ? a.base_masks[base * a.max_pages_per_seq + j] : ~0u;
    }
    a.above_lens[list] = a.base_lens[base];
    a.below_lens[list] = 0;
    if (a.below_listed) a.below_listed[list] = 0;
  }
}

}  // namespace

void mac_page_plan(const MacPagePlanArgs& a) {
  const int group = a.group_size();
  if (a.batch < 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || group > 32 ||
      a.page_size <= 0 || a.max_pages_per_seq <= 0 || a.band < 0)
    throw std::invalid_argument("mac_page_plan: bad shapes or parameters");
  std::vector<uint32_t> base(static_cast<size_t>(a.max_pages_per_seq));
  std::vector<int> base_order;  // mac+art: the base entries' positions, in its order
  std::vector<std::pair<int32_t, int>> position;  // mac+art: the row's pages by id
  for (int b = 0; b < a.batch; ++b) {
    if (!a.rows.has(b)) {
      pass_through(a, b);
      continue;
    }
    const int len = a.seq_lens[b];
    if (len <= 0 || len > a.max_pages_per_seq * a.page_size)
      throw std::invalid_argument("mac_page_plan: seq_len out of range");
    const int m = (len + a.page_size - 1) / a.page_size;
    const int split_page = mac_prefix_end(len - 1, a.band_of(b), a.page_size) / a.page_size;
    const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
    const bool art = a.art_order_of(b);
    if (art) positions_by_id(a, b, m, position);
    for (int h = 0; h < a.num_kv_heads; ++h) {
      // Per head of the group: a hit's first page of its band+tail, or -1 (the base's pages).
      int hit_page[32];
      for (int g = 0; g < group; ++g) {
        const int begin = a.band_begin[size_t(b) * a.num_heads + h * group + g];
        if (begin >= 0 && (begin % a.page_size != 0 || begin >= len))
          throw std::invalid_argument("mac_page_plan: a band start off a page boundary or past the row");
        hit_page[g] = begin < 0 ? -1 : begin / a.page_size;
      }
      if (art) base_masks_any_order(a, b, h, m, position, base.data(), base_order);
      else base_masks_by_position(a, b, h, m, base.data());
      const size_t list = size_t(b) * a.num_kv_heads + h;
      const size_t at = list * a.max_pages_per_seq;
      a.below_lens[list] = a.above_lens[list] = 0;
      ListOut below{a.below_table + at, a.below_masks + at, a.below_lens + list};
      ListOut above{a.above_table + at, a.above_masks + at, a.above_lens + list};
      auto mask_at = [&](int i) {
        uint32_t mask = 0;
        for (int g = 0; g < group; ++g) {
          const bool attends = hit_page[g] >= 0 ? i >= hit_page[g] : (base[size_t(i)] >> g & 1u) != 0;
          mask |= uint32_t(attends) << g;
        }
        return mask;
      };
      auto tokens_at = [&](int i) { return i + 1 < m ? a.page_size : len - i * a.page_size; };
      for (int i = art ? split_page : 0; i < m; ++i)  // ART's order lists `below` on its own, below
        if (const uint32_t mask = mask_at(i)) (i < split_page ? below : above).add(table[i], mask, tokens_at(i));
      if (art) {
        // The pages a hit head attends, [lo, split): newest first. Below lo no hit head attends
        // (lo is the earliest hit's band start), so the rest are the misses' base pages, in the
        // base list's order.
        int lo = split_page;
        for (int g = 0; g < group; ++g)
          if (hit_page[g] >= 0) lo = std::min(lo, hit_page[g]);
        for (int i = split_page - 1; i >= lo; --i)
          if (const uint32_t mask = mask_at(i)) below.add(table[i], mask, tokens_at(i));
        for (const int i : base_order)
          if (i < lo)
            if (const uint32_t mask = mask_at(i)) below.add(table[i], mask, tokens_at(i));
      }
      if (a.below_listed) {  // the heads ART's kernel must not wait for (0: not an ART list)
        uint32_t listed = 0;
        for (int k = 0; art && k < below.n; ++k) listed |= below.masks[k];
        a.below_listed[list] = listed;
      }
    }
  }
}

void mac_merge_states(const MacMergeArgs& a) {
  const int d = a.head_dim;
  for (size_t i = 0; i < size_t(a.batch) * a.num_heads; ++i) {
    float* cache = a.cache_o + i * d;
    merge_state(cache, a.cache_lse[i], a.below_o + i * d, a.below_lse[i], d);
    if (!a.out) continue;
    float* out = a.out + i * d;
    float lse = a.cache_lse[i];
    std::copy_n(cache, d, out);
    if (a.above_o) merge_state(out, lse, a.above_o + i * d, a.above_lse[i], d);
  }
}

namespace {

const MacRowRule& rule_of(const MacRowRule* rules, const int32_t* row_policy, int b) {
  return rules[row_policy ? row_policy[b] : 0];
}

// The squared L2 distance of two bf16 rows as the CUDA kernel sums it: 32 lane partials (lane l:
// fma over dims [l d/32, (l + 1) d/32) in order), then the xor butterfly 16, 8, 4, 2, 1 (each
// stage: partial[l] + partial[l ^ o]), so that the two agree bit for bit.
float match_distance(const uint16_t* q, const uint16_t* x, int d) {
  const int V = d / 32;
  std::array<float, 32> p{};
  for (int l = 0; l < 32; ++l)
    for (int v = 0; v < V; ++v) {
      const float diff = bf16_to_f32(q[l * V + v]) - bf16_to_f32(x[l * V + v]);
      p[size_t(l)] = std::fma(diff, diff, p[size_t(l)]);
    }
  for (int o = 16; o > 0; o >>= 1) {
    std::array<float, 32> next{};
    for (int l = 0; l < 32; ++l) next[size_t(l)] = p[size_t(l)] + p[size_t(l ^ o)];
    p = next;
  }
  return p[0];
}

}  // namespace

void mac_match(const MacMatchArgs& a) {
  if (a.head_dim % 32 != 0) throw std::invalid_argument("mac_match: head_dim a multiple of 32");
  const int d = a.head_dim, H = a.num_heads;
  const MacRingsView& r = a.rings;
  for (int b = 0; b < a.batch; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t out = size_t(b) * H + h;
      a.band_begin[out] = a.hit_entry[out] = -1;
      const int slot = a.row_slot[b];
      const MacRowRule& rule = rule_of(a.rules, a.row_policy, b);
      if (slot >= 0 && h == 0) std::copy_n(mac_fill_latest(r.fill, slot), 2, mac_fill_step(r.fill, slot));
      if (slot < 0 || !rule.active || a.positions[b] + 1 < rule.min_context) continue;
      const int32_t* fill = mac_fill_latest(r.fill, slot);
      const int first = fill[0], count = fill[1], K = rule.window;
      float best = 0.0f;
      int age = -1;
      for (int i = 0; i < count; ++i) {
        const uint16_t* x = r.q_pre + ((size_t(slot) * r.capacity + (first + i) % K) * H + h) * d;
        const float s = match_distance(a.q_pre + out * d, x, d);
        if (age < 0 || s <= best) best = s, age = i;  // ties: the newer
      }
      const bool hit = age >= 0 && (a.forced_hits >= 0 ? mac_forced_hit(b, h, a.positions[b]) < a.forced_hits
                                                      : std::sqrt(best) < std::sqrt(2.0f * float(d)) * (1.0f - rule.tau));
      if (!hit) {
        if (a.bytes) *a.bytes += (unsigned long long)(count) * d * sizeof(uint16_t);
        continue;
      }
      const int e = (first + age) % K;
      a.hit_entry[out] = e;
      a.band_begin[out] = mac_prefix_end(r.pos[size_t(slot) * r.capacity + e], rule.band, a.page_size);
      if (a.bytes) *a.bytes += (unsigned long long)(count) * d * sizeof(uint16_t) + (d + 1) * sizeof(float);
    }
}

void mac_merge_push(const MacMergePushArgs& a) {
  const MacMergeArgs& m = a.merge;
  const int d = m.head_dim, H = m.num_heads;
  const MacRingsView& r = a.rings;
  std::vector<float> c(static_cast<size_t>(d)), o(static_cast<size_t>(d));
  for (int b = 0; b < m.batch; ++b) {
    const int slot = a.row_slot ? a.row_slot[b] : -1;
    const MacRowRule& rule = rule_of(a.rules, a.row_policy, b);
    const bool push = slot >= 0 && rule.active;
    int32_t* latest = push ? mac_fill_latest(r.fill, slot) : nullptr;
    const int first = push ? latest[0] : 0, count = push ? latest[1] : 0;
    const int e_new = count < rule.window ? (first + count) % rule.window : first;
    for (int h = 0; h < H; ++h) {
      const size_t i = size_t(b) * H + h;
      const int entry = a.hit_entry ? a.hit_entry[i] : -1;
      float lse = kEmptyLse;
      std::fill(c.begin(), c.end(), 0.0f);
      if (slot >= 0 && entry >= 0) {
        std::copy_n(r.o + ((size_t(slot) * r.capacity + entry) * H + h) * d, d, c.data());
        lse = r.lse[(size_t(slot) * r.capacity + entry) * H + h];
      }
      merge_state(c.data(), lse, m.below_o + i * d, m.below_lse[i], d);
      if (m.out) {
        float l = lse;
        o = c;
        if (m.above_o) merge_state(o.data(), l, m.above_o + i * d, m.above_lse[i], d);
        std::copy(o.begin(), o.end(), m.out + i * d);
        if (a.out_lse) a.out_lse[i] = l;
      }
      if (m.cache_o) std::copy(c.begin(), c.end(), m.cache_o + i * d);
      if (m.cache_lse) m.cache_lse[i] = lse;
      if (!push) continue;
      const size_t at = (size_t(slot) * r.capacity + e_new) * H + h;
      std::copy_n(a.q_pre + i * d, d, r.q_pre + at * d);
      std::copy(c.begin(), c.end(), r.o + at * d);
      r.lse[at] = lse;
    }
    if (!push) continue;
    r.pos[size_t(slot) * r.capacity + e_new] = a.positions[b];
    mac_fill_advance(latest, 1, rule.window, latest);
    std::copy_n(latest, 2, mac_fill_step(r.fill, slot));
  }
}

}  // namespace skim::cpu
