#include "backend/cpu/quest_page_select.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backend/cpu/as_f32.h"
#include "backend/cpu/page_digest.h"
#include "backend/cpu/page_select_checks.h"

namespace skim::cpu {

namespace {

template <class Elem>
void check_args(const QuestPageSelectArgsOf<Elem>& a) {
  if (!select_shapes_ok(a) || !(a.budget > 0) || a.min_tokens < 0)
    throw std::invalid_argument("quest_page_select: bad shapes or parameters");
}

template <class Elem>
int context_of(const QuestPageSelectArgsOf<Elem>& a, int b) {
  return checked_context(a, b, "quest_page_select");
}

// Query head hq's kept pages (indices into the table), in descending bound order.
template <class Elem>
std::vector<int> head_pages(const QuestPageSelectArgsOf<Elem>& a, int b, int hq, std::vector<float>& scores) {
  const int d = a.head_dim, h = hq / a.group_size(), ctx = context_of(a, b);
  const int m = (ctx + a.page_size - 1) / a.page_size;
  if (m == 0) return {};
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  std::vector<float> q_buf, mn_buf, mx_buf;
  const float* q = as_f32(a.q + (size_t(b) * a.num_heads + hq) * d, d, q_buf);
  scores.resize(size_t(m));
  for (int p = 0; p < m; ++p) {
    const size_t off = (size_t(table[p]) * a.num_kv_heads + h) * d;
    scores[size_t(p)] = page_bound(q, as_f32(a.kmin + off, d, mn_buf), as_f32(a.kmax + off, d, mx_buf), d);
  }
  return top_pages(scores, quest_pages_kept(a.budget, a.min_tokens, ctx, a.page_size), m - 1);
}

template <class Elem>
void select_all(const QuestPageSelectArgsOf<Elem>& a) {
  check_args(a);
  const int ps = a.page_size, group = a.group_size();
  if (group > 32) throw std::invalid_argument("quest_page_select: a mask holds 32 query heads per KV head");
  std::vector<float> scores, best;  // best: per page, the largest bound of the heads keeping it
  std::vector<uint32_t> mask;  // per page of the sequence: the heads that keep it
  std::vector<int> order;
  for (int b = 0; b < a.batch; ++b) {
    if (!a.rows.has(b)) continue;
    const int ctx = context_of(a, b), m = (ctx + ps - 1) / ps;
    const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
    for (int h = 0; h < a.num_kv_heads; ++h) {
      mask.assign(size_t(m), 0u);
      best.assign(size_t(m), -INFINITY);
      for (int g = 0; g < group; ++g)
        for (int p : head_pages(a, b, h * group + g, scores)) {
          mask[size_t(p)] |= 1u << g;
          best[size_t(p)] = std::max(best[size_t(p)], p == m - 1 ? INFINITY : scores[size_t(p)]);
        }
      order.clear();  // the union in position order; the newest page (every head's) last
      for (int p = 0; p < m; ++p)
        if (mask[size_t(p)]) order.push_back(p);
      if (a.by_score)  // ART's order: descending best bound, ties in position order, the newest first
        std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return best[size_t(x)] > best[size_t(y)]; });
      const size_t list = size_t(b) * a.num_kv_heads + h;
      int listed = 0;
      for (int p : order) {
        a.out_table[list * a.max_pages_per_seq + listed] = table[p];
        a.out_masks[list * a.max_pages_per_seq + listed] = mask[size_t(p)];
        ++listed;
      }
      a.out_lens[list] = m == 0 ? 0 : (listed - 1) * ps + ctx - (m - 1) * ps;
      if (a.listed_tokens) *a.listed_tokens += (unsigned long long)a.out_lens[list];
    }
  }
}

}  // namespace

void quest_page_select(const QuestPageSelectArgs& a) { select_all(a); }
void quest_page_select(const QuestPageSelectArgsF32& a) { select_all(a); }

std::vector<int> quest_head_pages(const QuestPageSelectArgsF32& a, int b, int hq) {
  check_args(a);
  std::vector<float> scores;
  return head_pages(a, b, hq, scores);
}

}  // namespace skim::cpu
