// Arguments of token decode attention, shared by the backends' kernels and the CPU reference
// (skim::cpu::token_decode_attention; a CUDA kernel takes the same struct): decode attention
// over a token plan (attention/token_plan.h), the keys a token-granular selection chose
// (CSAttention's top-K plus its window), read row by row through each sequence's page table.
//
// The shapes, queries, pools and outputs are paged decode attention's (attention/
// paged_decode_args.h, `attn`), with each sequence's own pages: attn.page_table int32
// [batch][max_pages_per_seq] in position order and attn.seq_lens int32 [batch] its length
// (tables_per_kv_head false, head_masks null); position t of sequence b is row t % page_size of
// page page_table[b][t / page_size]. The lists:
//   token_lists  int32 [lists][max_tokens]   key positions, strictly ascending, below seq_len
//   token_lens   int32 [lists]
// one per (sequence, KV head), shared by the GQA group ([batch][num_kv_heads]), or with
// lists_per_query_head one per query head ([batch][num_heads]). An empty list gives (0, -inf).
// The element type is a parameter, as for PagedDecodeArgsOf: bf16 bits (the GPU cache) or fp32
// (the CPU cache). No CUDA types here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/paged_decode_args.h"

namespace skim {

template <class Elem>
struct TokenDecodeArgsOf {
  PagedDecodeArgsOf<Elem> attn;
  int max_tokens = 0;  // row stride of token_lists
  bool lists_per_query_head = false;
  const int32_t* token_lists = nullptr;
  const int32_t* token_lens = nullptr;

  int lists() const { return attn.batch * (lists_per_query_head ? attn.num_heads : attn.num_kv_heads); }
  // The list query head hq of sequence b reads.
  size_t list_index(int b, int hq) const {
    return lists_per_query_head ? size_t(b) * attn.num_heads + hq
                                : size_t(b) * attn.num_kv_heads + hq / attn.group_size();
  }
};

using TokenDecodeArgs = TokenDecodeArgsOf<uint16_t>;  // bf16 bits: the GPU cache
using TokenDecodeArgsF32 = TokenDecodeArgsOf<float>;  // the CPU cache

}  // namespace skim
