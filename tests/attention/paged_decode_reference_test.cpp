// cpu::paged_decode_attention (the oracle of the CUDA kernel) against a brute-force softmax
// over the tokens each query head may see, for every form of its arguments: the default pool
// layout, a head-major pool (explicit page and head strides), and a page list per (sequence,
// KV head) (a random subset of the sequence's pages, the last one always kept).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/paged_decode_args.h"
#include "backend/cpu/paged_decode_attention.h"
#include "core/dtype.h"
#include "../shuffled_pages.h"
#include "../test_random.h"

namespace skim {
namespace {

enum class Form { kDefault, kHeadMajor, kPerHeadLists };

class PagedDecodeReference : public ::testing::TestWithParam<Form> {};

TEST_P(PagedDecodeReference, MatchesBruteForce) {
  const Form form = GetParam();
  auto& rng = test::rng();
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int d = 32, hkv = 3, group = 2, heads = hkv * group, ps = 16;
  const std::vector<int> lens = {1, 37, 0, 64, 100};
  const int batch = int(lens.size());

  // k[b][h][t], v[b][h][t]: the rows of token t of sequence b, KV head h.
  std::vector<std::vector<std::vector<std::vector<uint16_t>>>> k(batch), v(batch);
  for (int b = 0; b < batch; ++b)
    for (auto* kv : {&k[b], &v[b]}) {
      kv->assign(hkv, std::vector<std::vector<uint16_t>>(lens[b], std::vector<uint16_t>(d)));
      for (auto& head : *kv)
        for (auto& row : head)
          for (auto& x : row) x = f32_to_bf16(uni(rng));
    }
  std::vector<uint16_t> q(size_t(batch) * heads * d);
  for (auto& x : q) x = f32_to_bf16(uni(rng));

  const test::ShuffledPages pages = test::shuffled_pages(lens, ps, 2, 1, rng);
  const int num_pages = pages.num_pages, max_pages = pages.stride;

  PagedDecodeArgs a;
  a.batch = batch;
  a.num_heads = heads;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.page_size = ps;
  a.max_pages_per_seq = max_pages;
  a.max_seq_len = *std::max_element(lens.begin(), lens.end());
  a.scale = 1.0f / std::sqrt(float(d));
  if (form == Form::kHeadMajor) {
    a.page_stride = size_t(ps) * d;
    a.head_stride = size_t(num_pages) * ps * d;
  }
  a.tables_per_kv_head = form == Form::kPerHeadLists;

  // Page lists and the tokens each (sequence, KV head) sees.
  std::vector<int32_t> table = pages.table;
  std::vector<int> list_lens = lens;
  std::vector<std::vector<std::vector<int>>> seen(batch, std::vector<std::vector<int>>(hkv));
  if (form == Form::kPerHeadLists) {
    table.assign(size_t(batch) * hkv * max_pages, 0);
    list_lens.assign(size_t(batch) * hkv, 0);
  }
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) {
      const int n = pages.pages_of(lens[b], ps);
      int kept = 0;
      for (int i = 0; i < n; ++i) {
        if (form == Form::kPerHeadLists && i < n - 1 && rng() % 2) continue;
        if (form == Form::kPerHeadLists) table[a.table_index(b, h) * max_pages + kept] = pages.table[size_t(b) * max_pages + i];
        ++kept;
        for (int t = i * ps; t < std::min(lens[b], (i + 1) * ps); ++t) seen[b][h].push_back(t);
      }
      if (form == Form::kPerHeadLists) list_lens[a.table_index(b, h)] = int(seen[b][h].size());
    }

  // Pools: every row no token owns stays NaN.
  const size_t elems = size_t(num_pages) * hkv * ps * d;
  std::vector<uint16_t> kp(elems, 0x7fc0), vp(elems, 0x7fc0);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h)
      for (int t = 0; t < lens[b]; ++t) {
        const size_t off = pages.table[size_t(b) * max_pages + t / ps] * a.page_stride_elems() +
                           h * a.head_stride_elems() + size_t(t % ps) * d;
        std::copy(k[b][h][t].begin(), k[b][h][t].end(), kp.begin() + off);
        std::copy(v[b][h][t].begin(), v[b][h][t].end(), vp.begin() + off);
      }

  std::vector<float> o(q.size()), lse(size_t(batch) * heads);
  a.q = q.data();
  a.k_pool = kp.data();
  a.v_pool = vp.data();
  a.page_table = table.data();
  a.seq_lens = list_lens.data();
  a.o = o.data();
  a.lse = lse.data();
  cpu::paged_decode_attention(a);

  // Brute force: o = softmax(scale q.k) v over the tokens seen, in double.
  for (int b = 0; b < batch; ++b)
    for (int hq = 0; hq < heads; ++hq) {
      const int h = hq / group;
      const size_t bh = size_t(b) * heads + hq;
      const std::vector<int>& ts = seen[b][h];
      if (ts.empty()) {
        EXPECT_TRUE(std::isinf(lse[bh]) && lse[bh] < 0) << "lse of an empty key set, b " << b;
        continue;
      }
      std::vector<double> s;
      for (int t : ts) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += double(bf16_to_f32(q[bh * d + e])) * bf16_to_f32(k[b][h][t][e]);
        s.push_back(a.scale * dot);
      }
      const double m = *std::max_element(s.begin(), s.end());
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (int e = 0; e < d; ++e) {
        double acc = 0;
        for (size_t j = 0; j < ts.size(); ++j) acc += s[j] / l * bf16_to_f32(v[b][h][ts[j]][e]);
        ASSERT_NEAR(o[bh * d + e], acc, 1e-5) << "b " << b << " head " << hq << " dim " << e;
      }
      ASSERT_NEAR(lse[bh], m + std::log(l), 1e-5) << "b " << b << " head " << hq;
    }
}

INSTANTIATE_TEST_SUITE_P(Forms, PagedDecodeReference,
                         ::testing::Values(Form::kDefault, Form::kHeadMajor, Form::kPerHeadLists),
                         [](const auto& info) {
                           switch (info.param) {
                             case Form::kDefault: return "DefaultPool";
                             case Form::kHeadMajor: return "HeadMajorPool";
                             default: return "PerKvHeadLists";
                           }
                         });

}  // namespace
}  // namespace skim
