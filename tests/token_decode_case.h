// A random token decode case (attention/token_decode_args.h) for the CPU and CUDA tests: bf16
// q/K/V over shuffled pages, and for each list a random ascending subset of its sequence's
// positions (some empty, some whole), shared by the GQA group or per query head.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/token_decode_args.h"
#include "core/dtype.h"
#include "shuffled_pages.h"
#include "test_random.h"

namespace skim::test {

struct TokenCase {
  int d = 32, hkv = 2, group = 3, ps = 16;
  std::vector<int> lens = {1, 300, 57, 700};
  std::vector<uint16_t> q, kp, vp;
  std::vector<int32_t> table, lists, list_lens;
  TokenDecodeArgs t;

  int heads() const { return hkv * group; }
  const uint16_t* key(const std::vector<uint16_t>& pool, int b, int h, int pos) const {
    return pool.data() + ((size_t(table[size_t(b) * t.attn.max_pages_per_seq + pos / ps]) * hkv + h) * ps + pos % ps) * d;
  }
};

inline TokenCase make_token_case(bool per_query_head, std::vector<int> lens = {1, 300, 57, 700}, int d = 32, int hkv = 2,
                          int group = 3) {
  TokenCase c;
  c.lens = std::move(lens);
  c.d = d;
  c.hkv = hkv;
  c.group = group;
  auto& rng = test::rng();
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int batch = int(c.lens.size());
  const test::ShuffledPages pages = test::shuffled_pages(c.lens, c.ps, 2, 1, rng);
  c.table = pages.table;
  const size_t elems = size_t(pages.num_pages) * c.hkv * c.ps * c.d;
  c.kp.resize(elems);
  c.vp.resize(elems);
  for (auto* v : {&c.kp, &c.vp})
    for (auto& x : *v) x = f32_to_bf16(uni(rng));
  c.q.resize(size_t(batch) * c.heads() * c.d);
  for (auto& x : c.q) x = f32_to_bf16(uni(rng));

  PagedDecodeArgs& a = c.t.attn;
  a.batch = batch;
  a.num_heads = c.heads();
  a.num_kv_heads = c.hkv;
  a.head_dim = c.d;
  a.page_size = c.ps;
  a.max_pages_per_seq = pages.stride;
  a.scale = 1.0f / std::sqrt(float(c.d));
  a.seq_lens = c.lens.data();
  TokenDecodeArgs& t = c.t;
  t.max_tokens = *std::max_element(c.lens.begin(), c.lens.end());
  t.lists_per_query_head = per_query_head;
  c.lists.assign(size_t(t.lists()) * t.max_tokens, -1);
  c.list_lens.assign(size_t(t.lists()), 0);
  const int per_row = t.lists() / batch;
  for (int b = 0; b < batch; ++b)
    for (int u = 0; u < per_row; ++u) {
      const size_t list = size_t(b) * per_row + u;
      const int keep_percent = int(rng() % 3) == 0 ? (u == 0 ? 0 : 100) : int(rng() % 60) + 5;
      int n = 0;
      for (int pos = 0; pos < c.lens[size_t(b)]; ++pos)
        if (int(rng() % 100) < keep_percent) c.lists[list * t.max_tokens + n++] = pos;
      c.list_lens[list] = n;
    }
  a.q = c.q.data();
  a.k_pool = c.kp.data();
  a.v_pool = c.vp.data();
  a.page_table = c.table.data();
  t.token_lists = c.lists.data();
  t.token_lens = c.list_lens.data();
  return c;
}

}  // namespace skim::test
