#include "backend/cpu/group_page_select.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "attention/page_digest.h"
#include "core/dtype.h"

namespace skim::cpu {

void group_page_select(const GroupPageSelectArgs& a, std::vector<float>* scores_out) {
  if (a.batch < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0 || a.page_size <= 0 ||
      a.num_heads % a.num_kv_heads != 0 || a.n_min < 1 || a.n_local < 0 || !(a.keep > 0 && a.keep <= 1))
    throw std::invalid_argument("group_page_select: bad shapes or parameters");
  const int d = a.head_dim, ps = a.page_size, group = a.group_size();
  if (scores_out) scores_out->assign(size_t(a.batch) * a.num_kv_heads * a.max_pages_per_seq, 0.0f);
  std::vector<float> q(d), scores, mn(d), mx(d);
  for (int b = 0; b < a.batch; ++b) {
    const int len = a.seq_lens[b];
    if (len < 0 || len > a.max_pages_per_seq * ps)
      throw std::invalid_argument("group_page_select: seq_len out of range");
    const int m = (len + ps - 1) / ps;
    const int32_t* table = a.page_table + size_t(b) * a.max_pages_per_seq;
    for (int h = 0; h < a.num_kv_heads; ++h) {
      // The group's queries pooled by their mean, in the order the policy sums them.
      std::fill(q.begin(), q.end(), 0.0f);
      for (int g = 0; g < group; ++g) {
        const uint16_t* qh = a.q + (size_t(b) * a.num_heads + size_t(h) * group + g) * d;
        for (int i = 0; i < d; ++i) q[i] += bf16_to_f32(qh[i]) / float(group);
      }
      scores.assign(m, 0.0f);
      for (int p = 0; p < m; ++p) {
        const size_t off = (size_t(table[p]) * a.num_kv_heads + h) * d;
        for (int i = 0; i < d; ++i) mn[i] = bf16_to_f32(a.kmin[off + i]), mx[i] = bf16_to_f32(a.kmax[off + i]);
        scores[p] = page_bound(q.data(), mn.data(), mx.data(), d);
      }
      for (int j = 0; j < std::min(a.n_local, m); ++j) scores[m - 1 - j] = INFINITY;
      std::vector<int> kept = top_pages(scores, a.pages_kept(m), m - 1);
      std::sort(kept.begin(), kept.end());
      const size_t list = size_t(b) * a.num_kv_heads + h;
      for (size_t i = 0; i < kept.size(); ++i) a.out_table[list * a.max_pages_per_seq + i] = table[kept[i]];
      a.out_lens[list] = m == 0 ? 0 : int(kept.size() - 1) * ps + (len - (m - 1) * ps);
      if (scores_out) std::copy(scores.begin(), scores.end(), scores_out->begin() + list * a.max_pages_per_seq);
    }
  }
}

}  // namespace skim::cpu
