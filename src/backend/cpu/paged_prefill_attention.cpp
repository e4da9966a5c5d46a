#include "backend/cpu/paged_prefill_attention.h"

#include <vector>

#include "attention/paged_decode_args.h"
#include "backend/cpu/paged_decode_attention.h"

namespace skim::cpu {

// Every row as a decode query over its own sequence's keys [0, position].
void paged_prefill_attention(const PagedPrefillArgs& a) {
  const int pages = a.max_position / a.page_size + 1;
  std::vector<int32_t> tables, lens;
  for (int s = 0; s < a.num_seqs; ++s) {
    const int begin = a.seq_rows ? a.seq_rows[s] : 0, end = a.seq_rows ? a.seq_rows[s + 1] : a.n;
    const int32_t* table = a.page_table + (a.seq_rows ? size_t(begin) * a.table_stride : 0);
    for (int r = begin; r < end; ++r) {
      tables.insert(tables.end(), table, table + pages);
      lens.push_back(a.positions[r] + 1);
    }
  }
  PagedDecodeArgs d;
  d.batch = a.n;
  d.num_heads = a.num_heads;
  d.num_kv_heads = a.num_kv_heads;
  d.head_dim = a.head_dim;
  d.page_size = a.page_size;
  d.max_pages_per_seq = pages;
  d.max_seq_len = a.max_position + 1;
  d.scale = a.scale;
  d.q = a.q;
  d.k_pool = a.k_pool;
  d.v_pool = a.v_pool;
  d.page_table = tables.data();
  d.seq_lens = lens.data();
  d.o = a.o;
  d.lse = a.lse;
  paged_decode_attention(d);
}

}  // namespace skim::cpu
