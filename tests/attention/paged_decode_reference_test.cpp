// cpu::paged_decode_attention (the oracle of the CUDA kernel) against a brute-force softmax
// over each head's keys, in the default pool layout and in a head-major one (explicit page
// and head strides): both layouts of the same tokens give the same result.
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

struct Tokens {  // per sequence, per KV head, per token: key and value rows (bf16 bits)
  std::vector<std::vector<std::vector<std::vector<uint16_t>>>> k, v;
};

TEST(PagedDecodeReference, MatchesBruteForceInBothLayouts) {
  auto& rng = test::rng();
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int d = 32, hkv = 3, group = 2, heads = hkv * group, ps = 16;
  const std::vector<int> lens = {1, 37, 0, 64};
  const int batch = int(lens.size());

  Tokens tok;
  tok.k.resize(batch);
  tok.v.resize(batch);
  for (int b = 0; b < batch; ++b)
    for (auto* kv : {&tok.k[b], &tok.v[b]}) {
      kv->assign(hkv, {});
      for (auto& head : *kv) {
        head.assign(lens[b], std::vector<uint16_t>(d));
        for (auto& row : head)
          for (auto& x : row) x = f32_to_bf16(uni(rng));
      }
    }
  std::vector<uint16_t> q(size_t(batch) * heads * d);
  for (auto& x : q) x = f32_to_bf16(uni(rng));

  // Brute force: o = softmax(scale q.k) v per query head, in double.
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<double> o_bf(q.size(), 0.0), lse_bf(size_t(batch) * heads, -INFINITY);
  for (int b = 0; b < batch; ++b)
    for (int hq = 0; hq < heads; ++hq) {
      const int h = hq / group;
      if (lens[b] == 0) continue;
      std::vector<double> s(lens[b]);
      for (int t = 0; t < lens[b]; ++t) {
        double dot = 0;
        for (int e = 0; e < d; ++e)
          dot += double(bf16_to_f32(q[(size_t(b) * heads + hq) * d + e])) * bf16_to_f32(tok.k[b][h][t][e]);
        s[t] = scale * dot;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (int t = 0; t < lens[b]; ++t)
        for (int e = 0; e < d; ++e)
          o_bf[(size_t(b) * heads + hq) * d + e] += s[t] / l * bf16_to_f32(tok.v[b][h][t][e]);
      lse_bf[size_t(b) * heads + hq] = m + std::log(l);
    }

  const test::ShuffledPages pages = test::shuffled_pages(lens, ps, 2, 1, test::rng());
  const std::vector<int32_t>& table = pages.table;
  const int num_pages = pages.num_pages, max_pages = pages.stride;

  for (bool head_major : {false, true}) {
    SCOPED_TRACE(head_major ? "head-major pool" : "default pool");
    PagedDecodeArgs a;
    a.batch = batch;
    a.num_heads = heads;
    a.num_kv_heads = hkv;
    a.head_dim = d;
    a.page_size = ps;
    a.max_pages_per_seq = max_pages;
    a.max_seq_len = *std::max_element(lens.begin(), lens.end());
    a.scale = scale;
    if (head_major) {
      a.page_stride = size_t(ps) * d;
      a.head_stride = size_t(num_pages) * ps * d;
    }
    const size_t elems = size_t(num_pages) * hkv * ps * d;
    std::vector<uint16_t> kp(elems, 0x7fc0), vp(elems, 0x7fc0);  // NaN where no token lives
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < hkv; ++h)
        for (int t = 0; t < lens[b]; ++t) {
          const size_t off = table[size_t(b) * max_pages + t / ps] * a.page_stride_elems() +
                             h * a.head_stride_elems() + size_t(t % ps) * d;
          std::copy(tok.k[b][h][t].begin(), tok.k[b][h][t].end(), kp.begin() + off);
          std::copy(tok.v[b][h][t].begin(), tok.v[b][h][t].end(), vp.begin() + off);
        }
    std::vector<float> o(q.size()), lse(size_t(batch) * heads);
    a.q = q.data();
    a.k_pool = kp.data();
    a.v_pool = vp.data();
    a.page_table = table.data();
    a.seq_lens = lens.data();
    a.o = o.data();
    a.lse = lse.data();
    cpu::paged_decode_attention(a);
    for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], o_bf[i], 1e-5) << "o[" << i << "]";
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(lse_bf[i])) {
        EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "lse[" << i << "] of an empty sequence";
        continue;
      }
      ASSERT_NEAR(lse[i], lse_bf[i], 1e-5) << "lse[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace skim
