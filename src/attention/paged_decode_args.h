// Arguments of paged decode attention, shared by the CUDA kernel and its CPU reference
// (skim::cuda::paged_decode_attention and skim::cpu::paged_decode_attention take the same
// struct). Decode means one query token per sequence; each sequence attends to all of its
// cached tokens [0, seq_len) through its page table.
//
// Layouts (row-major), the GPU form of the cache in kv/paged_kv_cache.h with bf16 elements:
//   q           Elem [batch][num_heads][head_dim]
//   k_pool/v_pool Elem [num_pages][num_kv_heads][page_size][head_dim]
//   page_table  int32 [batch][max_pages_per_seq]   (page ids into the pools)
//   seq_lens    int32 [batch]
//   o           fp32 [batch][num_heads][head_dim]   (normalised over the keys)
//   lse         fp32 [batch][num_heads]             (natural log; -inf for an empty sequence)
// Query head hq reads KV head hq / (num_heads / num_kv_heads), as in Llama's GQA.
// With tables_per_kv_head, every (sequence, KV head) has its own page list (what a selection
// shared by a GQA group produces, e.g. ReSA's): page_table int32 [batch][num_kv_heads]
// [max_pages_per_seq] and seq_lens int32 [batch][num_kv_heads], the tokens in the listed pages
// (every listed page full but the last). A selection made per query head (Quest's) lists the
// union of its group's pages once, and head_masks says which heads attend which listed page:
// head_masks uint32 [batch][num_kv_heads][max_pages_per_seq], bit g of an entry set when query
// head g of the group attends that page (groups of at most 32 heads). The CUDA kernel reads
// the union once for the group (a page a head does not attend scores -inf for it); the fp32
// CPU kernel reads each key once for the heads that attend it (attend_shared_keys). A head
// that attends no page gets (0, -inf).
//
// The element type is a parameter: PagedDecodeArgs (bf16, as raw 16-bit patterns; core/dtype.h
// converts) is the GPU cache's and the CUDA kernel's; PagedDecodeArgsF32 is the CPU cache's
// (fp32, the CPU backend's kernel). o and lse are fp32 in both. No CUDA types here, so plain
// C++ (the CPU kernels, tests, the engine) can include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace skim {

template <class Elem>
struct PagedDecodeArgsOf {
  int batch = 0;
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // divides num_heads
  int head_dim = 0;      // 64 or 128 on the GPU
  int page_size = 16;    // the GPU kernel supports 16 only
  int max_pages_per_seq = 0;  // row stride of page_table
  // Host-side upper bound of seq_lens (which live on the device for the GPU call): plans
  // how the keys are split across CTAs. Sequences longer than this are not allowed.
  int max_seq_len = 0;
  float scale = 0.0f;  // multiplies q.k, 1/sqrt(head_dim) for Llama
  // Elements between consecutive page ids and between consecutive KV heads in k_pool/v_pool;
  // 0 means the layout above (page_stride = num_kv_heads * page_size * head_dim, head_stride
  // = page_size * head_dim). A head-major pool [num_kv_heads][num_pages][page_size][head_dim]
  // has page_stride = page_size * head_dim and head_stride = num_pages * page_size * head_dim.
  size_t page_stride = 0;
  size_t head_stride = 0;
  bool tables_per_kv_head = false;
  // GPU only. true: pages are split among CTAs statically and the result is bitwise
  // reproducible. false: CTAs take pages from a shared counter, so those the memory system
  // serves faster take more (a little faster; results vary in the last bits run to run).
  bool deterministic = true;
  // GPU only: the rows the split of the keys over CTAs is planned for (0: batch). A batch whose
  // rows read lists of very different lengths (dense rows beside sparse ones, one long sequence
  // among short ones) plans as many CTAs per (row, KV unit) as `split_rows` rows of the longest
  // list would need to fill the machine: the long rows then fill it alone, and the CTAs of the
  // short ones find little or nothing to read and leave early. Planned for the whole batch, the
  // long rows had the CTAs of a uniform batch: at batch 8 with 2 dense rows beside 6 quest rows
  // the step took 11% longer (H100, 2026-11-27; with 3 or 4 dense rows the two plans ran alike).
  int split_rows = 0;
  // Rows of q (0: batch): row b attends with query row b % q_rows, so one call can attend two
  // list sets of the same queries (MAC's keys below and above a row's prefix end, as rows
  // [0, n) and [n, 2n)). Not with the fp32 form or rows().
  int q_rows = 0;
  // GPU only, with q_rows: the rows [q_rows, batch) list at most this many pages each (0: no
  // bound), so each of their units takes only the CTAs its pages need (the others leave before
  // they wait on the previous kernel), dispatched after the other rows' CTAs. MAC's parts above
  // the prefix ends (a band and a tail) otherwise took the first wave with CTAs that found
  // nothing to read, ahead of the parts below (whole contexts).
  int short_pages = 0;

  const Elem* q = nullptr;
  const Elem* k_pool = nullptr;
  const Elem* v_pool = nullptr;
  const int32_t* page_table = nullptr;
  const int32_t* seq_lens = nullptr;
  const uint32_t* head_masks = nullptr;  // with tables_per_kv_head; null: every head, every page

  float* o = nullptr;
  float* lse = nullptr;
  // GPU only, optional: the output rounded to bf16 (round to nearest even) here instead of o,
  // which is then left untouched: the o projection's input, with no conversion pass after.
  uint16_t* o_bf16 = nullptr;

  // GPU only: scratch for the partial states of the split-KV chunks, at least
  // cuda::paged_decode_workspace_size(*this) bytes, zero-filled once after allocation (the
  // calls leave it reusable). The call allocates nothing.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  int group_size() const { return num_kv_heads > 0 ? num_heads / num_kv_heads : 0; }
  size_t page_stride_elems() const {
    return page_stride ? page_stride : size_t(num_kv_heads) * page_size * head_dim;
  }
  size_t head_stride_elems() const { return head_stride ? head_stride : size_t(page_size) * head_dim; }
  // The same call over other per-(row, KV head) lists (a stage's plan: MAC's parts, Retro's
  // supplements), bounded by max_len tokens, into other states.
  PagedDecodeArgsOf with_lists(int max_len, const int32_t* table, const int32_t* lens, const uint32_t* masks,
                               float* out_o, float* out_lse) const {
    PagedDecodeArgsOf a = *this;
    a.max_seq_len = max_len;
    a.tables_per_kv_head = true;
    a.page_table = table;
    a.seq_lens = lens;
    a.head_masks = masks;
    a.o = out_o;
    a.lse = out_lse;
    a.o_bf16 = nullptr;  // a stage's states, fp32
    return a;
  }
  // The same call over sequences [begin, end): their queries, lists and outputs (a decode
  // step's rows that run cs first, the others' page plan after them).
  PagedDecodeArgsOf rows(int begin, int end) const {
    PagedDecodeArgsOf a = *this;
    const size_t heads = size_t(begin) * num_heads, lists = size_t(begin) * (tables_per_kv_head ? num_kv_heads : 1);
    auto at = [](auto* p, size_t offset) { return p ? p + offset : p; };
    a.batch = end - begin;
    a.q = at(q, heads * head_dim);
    a.o = at(o, heads * head_dim);
    a.o_bf16 = at(o_bf16, heads * head_dim);
    a.lse = at(lse, heads);
    a.page_table = at(page_table, lists * max_pages_per_seq);
    a.seq_lens = at(seq_lens, lists);
    a.head_masks = at(head_masks, lists * max_pages_per_seq);
    return a;
  }
  // The query row of sequence b (q_rows).
  size_t q_row(int b) const { return q_rows > 0 ? size_t(b % q_rows) : size_t(b); }
  // Index of the page list (row of page_table, entry of seq_lens) of sequence b, KV head h.
  size_t table_index(int b, int h) const {
    return tables_per_kv_head ? size_t(b) * num_kv_heads + h : size_t(b);
  }
};

using PagedDecodeArgs = PagedDecodeArgsOf<uint16_t>;  // bf16 bits: the GPU cache
using PagedDecodeArgsF32 = PagedDecodeArgsOf<float>;  // the CPU cache

// The split_rows of a call whose rows' lists hold these many tokens at most: their sum in units of
// the longest, rounded up; 0 (plan for the batch) when that is every row, as when the lists are
// alike. A row that reads next to nothing (a RetroAttention past row's supplement) counts 0.
inline int split_rows_for(std::span<const int64_t> list_tokens) {
  int64_t sum = 0, longest = 0;
  for (int64_t t : list_tokens) sum += t, longest = std::max(longest, t);
  const int rows = int(list_tokens.size());
  const int split = longest > 0 ? int((sum + longest - 1) / longest) : rows;
  return split >= rows ? 0 : split;
}

}  // namespace skim
