#include "backend/cpu/group_page_select.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backend/cpu/as_f32.h"
#include "backend/cpu/page_digest.h"
#include "backend/cpu/page_select_checks.h"
#include "core/dtype.h"

namespace skim::cpu {

namespace {

template <class Elem>
void check_args(const GroupPageSelectArgsOf<Elem>& a) {
  if (!select_shapes_ok(a) || a.n_min < 1 || a.n_local < 0 || !(a.keep > 0 && a.keep <= 1))
    throw std::invalid_argument("group_page_select: bad shapes or parameters");
}

// Pages of sequence b (checked against the table's capacity).
template <class Elem>
int pages_of(const GroupPageSelectArgsOf<Elem>& a, int b) {
  return (checked_context(a, b, "group_page_select") + a.page_size - 1) / a.page_size;
}

// Every page's bound for (sequence b, KV head h) into `scores` (the forced ones +inf); returns
// the kept page indices in descending bound order.
template <class Elem>
std::vector<int> select_list(const GroupPageSelectArgsOf<Elem>& a, int b, int h, std::vector<float>& scores) {
  const int d = a.head_dim, group = a.group_size(), m = pages_of(a, b);
  const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
  // The group's queries pooled by their mean, in the order the policy sums them.
  std::vector<float> q(size_t(d), 0.0f), buf, mn_buf, mx_buf;
  for (int g = 0; g < group; ++g) {
    const float* qh = as_f32(a.q + (size_t(b) * a.num_heads + size_t(h) * group + g) * d, d, buf);
    for (int i = 0; i < d; ++i) q[size_t(i)] += qh[i] / float(group);
  }
  scores.assign(size_t(m), 0.0f);
  for (int p = 0; p < m; ++p) {
    const size_t off = (size_t(table[p]) * a.num_kv_heads + h) * d;
    scores[size_t(p)] = page_bound(q.data(), as_f32(a.kmin + off, d, mn_buf), as_f32(a.kmax + off, d, mx_buf), d);
  }
  for (int j = 0; j < std::min(a.n_local, m); ++j) scores[size_t(m - 1 - j)] = INFINITY;
  return top_pages(scores, a.pages_kept(m), m - 1);
}

template <class Elem>
void select_all(const GroupPageSelectArgsOf<Elem>& a, std::vector<float>* scores_out) {
  check_args(a);
  const int ps = a.page_size;
  if (scores_out) scores_out->assign(size_t(a.batch) * a.num_kv_heads * a.max_pages_per_seq, 0.0f);
  std::vector<float> scores;
  for (int b = 0; b < a.batch; ++b) {
    if (!a.rows.has(b)) continue;
    const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
    const int len = a.seq_lens[b], m = pages_of(a, b);
    for (int h = 0; h < a.num_kv_heads; ++h) {
      std::vector<int> kept = select_list(a, b, h, scores);  // by descending bound
      if (!a.by_score) std::sort(kept.begin(), kept.end());
      const size_t list = size_t(b) * a.num_kv_heads + h;
      for (size_t i = 0; i < kept.size(); ++i) {
        a.out_table[list * a.max_pages_per_seq + i] = table[kept[i]];
        if (a.out_masks) a.out_masks[list * a.max_pages_per_seq + i] = ~0u;
      }
      a.out_lens[list] = m == 0 ? 0 : int(kept.size() - 1) * ps + (len - (m - 1) * ps);
      if (scores_out) std::copy(scores.begin(), scores.end(), scores_out->begin() + long(list * a.max_pages_per_seq));
    }
  }
}

}  // namespace

void group_page_select(const GroupPageSelectArgs& a, std::vector<float>* scores) { select_all(a, scores); }
void group_page_select(const GroupPageSelectArgsF32& a, std::vector<float>* scores) { select_all(a, scores); }

std::vector<int> group_pages_by_bound(const GroupPageSelectArgsF32& a, int b, int h) {
  check_args(a);
  std::vector<float> scores;
  return select_list(a, b, h, scores);
}

}  // namespace skim::cpu
