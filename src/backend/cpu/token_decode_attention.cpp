#include "backend/cpu/token_decode_attention.h"

#include <stdexcept>
#include <vector>

#include "backend/cpu/attention_definition.h"
#include "backend/cpu/split_attend.h"

namespace skim::cpu {

namespace {

template <class Elem>
void check_shapes(const TokenDecodeArgsOf<Elem>& t) {
  const PagedDecodeArgsOf<Elem>& a = t.attn;
  if (a.batch < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0 || a.page_size <= 0 ||
      a.num_heads % a.num_kv_heads != 0 || t.max_tokens < 0 || a.max_pages_per_seq < 0)
    throw std::invalid_argument("token_decode_attention: bad shapes");
  if (a.tables_per_kv_head || a.head_masks)
    throw std::invalid_argument("token_decode_attention: attn holds each sequence's own table (no per-head lists or masks)");
  for (int b = 0; b < a.batch; ++b)
    if (a.seq_lens[b] < 0 || a.seq_lens[b] > a.max_pages_per_seq * a.page_size)
      throw std::invalid_argument("token_decode_attention: seq_len out of range");
}

// The list query head hq of sequence b reads, checked: at most max_tokens, strictly ascending,
// below the sequence's length.
template <class Elem>
const int32_t* checked_list(const TokenDecodeArgsOf<Elem>& t, int b, int hq, int& len) {
  const size_t i = t.list_index(b, hq);
  len = t.token_lens[i];
  if (len < 0 || len > t.max_tokens) throw std::invalid_argument("token_decode_attention: token_len out of range");
  const int32_t* list = t.token_lists + i * size_t(t.max_tokens);
  for (int j = 0; j < len; ++j)
    if (list[j] < 0 || list[j] >= t.attn.seq_lens[b] || (j > 0 && list[j] <= list[j - 1]))
      throw std::invalid_argument("token_decode_attention: positions must be ascending and below seq_len");
  return list;
}

// Runs of consecutive positions: the ranges attend scans.
std::vector<KeyRange> runs(const int32_t* list, int len) {
  std::vector<KeyRange> r;
  for (int j = 0; j < len; ++j) {
    if (!r.empty() && r.back().end == list[j])
      r.back().end += 1;
    else
      r.push_back({list[j], list[j] + 1});
  }
  return r;
}

}  // namespace

void token_decode_attention(const TokenDecodeArgsF32& t) {
  check_shapes(t);
  const PagedDecodeArgsF32& a = t.attn;
  if (a.page_stride != 0 || a.head_stride != 0)
    throw std::invalid_argument("token_decode_attention (fp32): only the default pool layout");
  const int group = a.group_size(), heads_per_list = t.lists_per_query_head ? 1 : group;
  const AttendRows rows{.num_heads = a.num_heads, .num_kv_heads = a.num_kv_heads, .head_dim = a.head_dim,
                        .scale = a.scale,
                        .kv = KVLayerView{.k = a.k_pool, .v = a.v_pool, .num_kv_heads = a.num_kv_heads,
                                          .head_dim = a.head_dim, .page_size = a.page_size},
                        .q = a.q, .out = a.o};
  std::vector<AttendTask> tasks;
  tasks.reserve(size_t(t.lists()));
  for (int b = 0; b < a.batch; ++b)
    for (int hq = 0; hq < a.num_heads; hq += heads_per_list) {
      int len = 0;
      const int32_t* list = checked_list(t, b, hq, len);
      tasks.push_back({b, hq / group, hq, heads_per_list, runs(list, len), a.page_table + size_t(b) * a.max_pages_per_seq});
    }
  attend_tasks(rows, tasks, a.lse);
}

void token_decode_attention(const TokenDecodeArgs& t) {
  check_shapes(t);
  const PagedDecodeArgs& a = t.attn;
  const int d = a.head_dim, ps = a.page_size, group = a.group_size();
  const size_t page_stride = a.page_stride_elems(), head_stride = a.head_stride_elems();
  std::vector<float> q(static_cast<size_t>(d));
  std::vector<double> s;
  for (int b = 0; b < a.batch; ++b) {
    const int32_t* pages = a.page_table + size_t(b) * a.max_pages_per_seq;
    for (int hq = 0; hq < a.num_heads; ++hq) {
      const int h = hq / group;
      int len = 0;
      const int32_t* list = checked_list(t, b, hq, len);
      auto row = [&](const uint16_t* pool, int j) {  // key list[j]: row p % ps of page pages[p / ps]
        return pool + size_t(pages[list[j] / ps]) * page_stride + h * head_stride + size_t(list[j] % ps) * d;
      };
      const uint16_t* qb = a.q + (size_t(b) * a.num_heads + hq) * d;
      for (int i = 0; i < d; ++i) q[size_t(i)] = bf16_to_f32(qb[i]);
      float lse = 0;
      definition_state(q.data(), d, a.scale, len, [&](int j) { return row(a.k_pool, j); },
                       [&](int j) { return row(a.v_pool, j); }, s, a.o + (size_t(b) * a.num_heads + hq) * d, lse);
      if (a.lse) a.lse[size_t(b) * a.num_heads + hq] = lse;
    }
  }
}

}  // namespace skim::cpu
