// Arguments of paged prefill attention, shared by the CUDA kernel and its CPU reference
// (skim::cuda::paged_prefill_attention, skim::cpu::paged_prefill_attention): the rows of a
// prefill chunk of one sequence, or of several (one pass over the chunks of every sequence ReSA
// rectifies in a step), row r being the query at positions[r], attend causally to its
// sequence's cached keys [0, positions[r]] (their K/V already written). Layouts as in
// paged_decode_args.h: q bf16 [n][num_heads][head_dim], pools bf16
// [num_pages][num_kv_heads][page_size][head_dim], o fp32 [n][num_heads][head_dim], lse fp32
// [n][num_heads] (natural log).
#pragma once

#include <cstddef>
#include <cstdint>

namespace skim {

struct PagedPrefillArgs {
  int n = 0;  // rows
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int page_size = 16;  // the GPU kernel supports 16 only
  int max_position = 0;  // host-side upper bound of positions[] (plans the page loop)
  float scale = 0.0f;
  const uint16_t* q = nullptr;
  const uint16_t* k_pool = nullptr;
  const uint16_t* v_pool = nullptr;
  const int32_t* page_table = nullptr;  // the sequence's pages (> max_position / page_size)
  const int32_t* positions = nullptr;   // [n]; each sequence's rows at consecutive positions
  // Several sequences: rows [seq_rows[s], seq_rows[s + 1]) are sequence s's, its page table at
  // page_table + seq_rows[s] * table_stride (a table per row, as the decode batch stages them).
  // seq_rows in the kernel's memory, seq_rows[num_seqs] = n; nullptr: one sequence.
  int num_seqs = 1;
  const int32_t* seq_rows = nullptr;
  int table_stride = 0;
  float* o = nullptr;
  float* lse = nullptr;
  // GPU only: scratch for splitting the key range over several CTAs when the rows are too few
  // to fill the machine (a short chunk over a long context: ReSA's rectification), at least
  // cuda::paged_prefill_workspace_size bytes; none (nullptr) runs every row tile in one CTA.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  int group_size() const { return num_kv_heads > 0 ? num_heads / num_kv_heads : 0; }
};

}  // namespace skim
