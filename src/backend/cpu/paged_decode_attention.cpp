#include "backend/cpu/paged_decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "backend/cpu/attention_definition.h"
#include "backend/cpu/split_attend.h"
#include "core/dtype.h"

namespace skim::cpu {

namespace {

template <class Elem>
void check_shapes(const PagedDecodeArgsOf<Elem>& a) {
  if (a.batch < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0 ||
      a.page_size <= 0 || a.num_heads % a.num_kv_heads != 0)
    throw std::invalid_argument("paged_decode_attention: bad shapes");
  if (a.head_masks && (!a.tables_per_kv_head || a.group_size() > 32))
    throw std::invalid_argument("paged_decode_attention: head_masks need tables_per_kv_head and groups of <= 32 heads");
}

// Tokens of list `list` (sequence b) and its checked length.
int list_len(const PagedDecodeArgsF32& a, size_t list) {
  const int len = a.seq_lens[list];
  if (len < 0 || len > a.max_pages_per_seq * a.page_size)
    throw std::invalid_argument("paged_decode_attention: seq_len out of range");
  return len;
}

// The key ranges (positions in the list) of query head g of the group under the list's masks:
// runs of consecutive listed pages whose bit g is set.
std::vector<KeyRange> masked_ranges(const uint32_t* mask, int len, int page_size, int g) {
  std::vector<KeyRange> ranges;
  for (int p = 0; p * page_size < len; ++p) {
    if (!(mask[p] >> g & 1u)) continue;
    const KeyRange r{p * page_size, std::min(len, (p + 1) * page_size)};
    if (!ranges.empty() && ranges.back().end == r.begin)
      ranges.back().end = r.end;
    else
      ranges.push_back(r);
  }
  return ranges;
}

}  // namespace

void paged_decode_attention(const PagedDecodeArgsF32& a) {
  check_shapes(a);
  if (a.page_stride != 0 || a.head_stride != 0 || (a.q_rows > 0 && a.q_rows != a.batch))
    throw std::invalid_argument("paged_decode_attention (fp32): only the default pool layout, a query per row");
  const int group = a.group_size();
  const AttendRows rows{.num_heads = a.num_heads, .num_kv_heads = a.num_kv_heads, .head_dim = a.head_dim,
                        .scale = a.scale,
                        .kv = KVLayerView{.k = a.k_pool, .v = a.v_pool, .num_kv_heads = a.num_kv_heads,
                                          .head_dim = a.head_dim, .page_size = a.page_size},
                        .q = a.q, .out = a.o};
  std::vector<AttendTask> tasks;  // unmasked lists: the group reads the list's tokens once
  std::vector<HeadKeys> masked;   // masked lists: each head its own pages of the list
  for (int b = 0; b < a.batch; ++b) {
    for (int h = 0; h < a.num_kv_heads; ++h) {
      const size_t list = a.table_index(b, h);
      const int len = list_len(a, list);
      const int32_t* pages = a.page_table + list * a.max_pages_per_seq;
      if (!a.head_masks) {
        AttendTask t{b, h, h * group, group, {}, pages};
        if (len > 0) t.ranges.push_back({0, len});
        tasks.push_back(std::move(t));
        continue;
      }
      for (int g = 0; g < group; ++g)
        masked.push_back({b, h * group + g, masked_ranges(a.head_masks + list * a.max_pages_per_seq, len, a.page_size, g),
                          pages});
    }
  }
  if (!a.head_masks) {
    attend_tasks(rows, tasks, a.lse);
    return;
  }
  // Keys the group's heads share are read once for all of them (attend_shared_keys), as the
  // CUDA kernel reads a listed page once for the group.
  std::vector<float> o(masked.size() * size_t(a.head_dim)), lse(masked.size());
  attend_shared_keys(rows, masked, o.data(), lse.data());
  for (size_t e = 0; e < masked.size(); ++e) {
    const size_t at = size_t(masked[e].row) * a.num_heads + masked[e].head;
    std::copy_n(o.data() + e * a.head_dim, a.head_dim, a.o + at * a.head_dim);
    if (a.lse) a.lse[at] = lse[e];
  }
}

void paged_decode_attention(const PagedDecodeArgs& a) {
  check_shapes(a);
  const int d = a.head_dim, ps = a.page_size, group = a.group_size();
  const size_t page_stride = a.page_stride_elems(), head_stride = a.head_stride_elems();
  std::vector<float> q(d);
  std::vector<double> s;
  std::vector<int> seen;

  for (int b = 0; b < a.batch; ++b) {
    for (int hq = 0; hq < a.num_heads; ++hq) {
      const int h = hq / group;
      const size_t list = a.table_index(b, h);
      const int len = a.seq_lens[list];
      if (len < 0 || len > a.max_pages_per_seq * ps)
        throw std::invalid_argument("paged_decode_attention: seq_len out of range");
      const int32_t* table = a.page_table + list * a.max_pages_per_seq;
      // Token t of the list lives in page table[t / ps], row t % ps.
      auto row = [&](const uint16_t* pool, int t) {
        return pool + size_t(table[t / ps]) * page_stride + h * head_stride + size_t(t % ps) * d;
      };
      const uint16_t* qb = a.q + (a.q_row(b) * a.num_heads + hq) * d;
      for (int i = 0; i < d; ++i) q[i] = bf16_to_f32(qb[i]);
      float* o = a.o + (size_t(b) * a.num_heads + hq) * d;
      float& lse = a.lse[size_t(b) * a.num_heads + hq];
      // The tokens this head attends: the list's, less the pages its mask bit leaves out.
      const uint32_t* mask = a.head_masks ? a.head_masks + list * a.max_pages_per_seq : nullptr;
      seen.clear();
      for (int t = 0; t < len; ++t)
        if (!mask || (mask[t / ps] >> (hq % group) & 1u)) seen.push_back(t);
      definition_state(q.data(), d, a.scale, int(seen.size()), [&](int j) { return row(a.k_pool, seen[size_t(j)]); },
                       [&](int j) { return row(a.v_pool, seen[size_t(j)]); }, s, o, lse);
    }
  }
}

}  // namespace skim::cpu
