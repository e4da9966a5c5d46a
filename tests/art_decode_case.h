// ART decode attention inputs, for the CPU reference's tests (tests/attention/
// art_decode_test.cpp) and the CUDA kernel's (tests/cuda/art_decode_attention_test.cpp):
// random bf16 queries, keys and values over shuffled pages; one list per (sequence, KV head),
// a random order of the sequence's pages with its partial page first (as ART's lists are),
// optionally random per-head masks. `prefix` gives the same keys as a paged decode list
// (partial page last) cut after a number of the list's pages: what ART reads when it stops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "attention/art_decode_args.h"
#include "core/dtype.h"
#include "shuffled_pages.h"
#include "test_random.h"

namespace skim::test {

struct ArtDecodeCase {
  int head_dim, kv_heads, group, page_size = 16;
  std::vector<int> lens;
  ShuffledPages pages;
  std::vector<uint16_t> q, k, v;
  std::vector<int32_t> table, list_lens;  // [batch][kv_heads][stride], [batch][kv_heads]
  std::vector<uint32_t> masks;            // table's shape; empty: every head attends every page

  ArtDecodeCase(int d, int hkv, int g, std::vector<int> seq_lens, bool with_masks, float q_scale = 1.0f)
      : head_dim(d), kv_heads(hkv), group(g), lens(std::move(seq_lens)) {
    auto& r = rng();
    pages = shuffled_pages(lens, page_size, 2, 3, r);
    const size_t pool = size_t(pages.num_pages) * hkv * page_size * d;
    auto bf16 = [](const std::vector<float>& f) {
      std::vector<uint16_t> b(f.size());
      std::transform(f.begin(), f.end(), b.begin(), f32_to_bf16);
      return b;
    };
    k = bf16(random_vector(pool));
    v = bf16(random_vector(pool));
    q = bf16(random_vector(size_t(batch()) * hkv * g * d, q_scale));
    table.assign(size_t(batch()) * hkv * pages.stride, 0x7fffffff);
    list_lens.assign(size_t(batch()) * hkv, 0);
    if (with_masks) masks.assign(table.size(), 0u);
    for (int b = 0; b < batch(); ++b) {
      const int n = pages.pages_of(lens[size_t(b)], page_size);
      for (int h = 0; h < hkv; ++h) {
        std::vector<int32_t> order(pages.table.begin() + b * pages.stride, pages.table.begin() + b * pages.stride + n);
        if (n > 1) std::shuffle(order.begin(), order.end() - 1, r);
        if (n > 0) std::rotate(order.begin(), order.end() - 1, order.end());  // the partial page first
        std::copy(order.begin(), order.end(), table.begin() + list(b, h) * pages.stride);
        list_lens[list(b, h)] = lens[size_t(b)];
        for (int i = 0; i < n && with_masks; ++i)  // every page attended by some head
          masks[list(b, h) * pages.stride + i] = (std::uniform_int_distribution<uint32_t>(1, (1u << g) - 1))(r);
      }
    }
  }
  int batch() const { return int(lens.size()); }
  size_t list(int b, int h) const { return size_t(b) * kv_heads + h; }

  // Arguments over host or device copies of the inputs (the caller's pointers).
  ArtDecodeArgs args(const uint16_t* q_, const uint16_t* k_, const uint16_t* v_, const int32_t* table_,
                     const int32_t* lens_, const uint32_t* masks_, float* o, float* lse) const {
    ArtDecodeArgs a;
    PagedDecodeArgs& at = a.attn;
    at.batch = batch();
    at.num_heads = kv_heads * group;
    at.num_kv_heads = kv_heads;
    at.head_dim = head_dim;
    at.max_pages_per_seq = pages.stride;
    at.max_seq_len = *std::max_element(lens.begin(), lens.end());
    at.scale = 1.0f / std::sqrt(float(head_dim));
    at.tables_per_kv_head = true;
    at.q = q_;
    at.k_pool = k_;
    at.v_pool = v_;
    at.page_table = table_;
    at.seq_lens = lens_;
    at.head_masks = masks_;
    at.o = o;
    at.lse = lse;
    return a;
  }

  // The first `read` pages of every list (fewer where a list is shorter) as paged decode lists,
  // the partial page moved last: table, lens and masks into the given vectors.
  void prefix(int read, std::vector<int32_t>& t, std::vector<int32_t>& l, std::vector<uint32_t>& m) const {
    t.assign(table.size(), 0x7fffffff);
    l.assign(list_lens.size(), 0);
    m.assign(masks.empty() ? 0 : masks.size(), 0u);
    for (size_t li = 0; li < list_lens.size(); ++li) {
      const int len = list_lens[li], n = pages.pages_of(len, page_size), keep = std::min(n, read);
      if (keep == 0) continue;
      const size_t base = li * pages.stride;
      for (int i = 1; i < keep; ++i) {
        t[base + i - 1] = table[base + i];
        if (!m.empty()) m[base + i - 1] = masks[base + i];
      }
      t[base + keep - 1] = table[base];
      if (!m.empty()) m[base + keep - 1] = masks[base];
      l[li] = (keep - 1) * page_size + (len - (n - 1) * page_size);
    }
  }
};

}  // namespace skim::test
