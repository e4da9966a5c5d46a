// cpu::paged_decode_attention (the oracle of the CUDA kernel) against a brute-force softmax
// over the tokens each query head may see, for every form of its arguments: the default pool
// layout, a head-major pool (explicit page and head strides), and a page list per (sequence,
// KV head) (a random subset of the sequence's pages, the last one always kept), and such lists
// with a random page mask per query head; the call split into two by rows(); every row on row 0's
// queries (q_rows). The fp32
// kernel the CPU engine runs (same name, PagedDecodeArgsF32) is held to the reference on the
// same bf16-exact inputs, with lists long enough to be split across threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/paged_decode_args.h"
#include "backend/cpu/paged_decode_attention.h"
#include "core/dtype.h"
#include "brute_force_state.h"
#include "../shuffled_pages.h"
#include "../test_random.h"

namespace skim {
namespace {

enum class Form { kDefault, kHeadMajor, kPerHeadLists, kHeadMasks };

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_f32(x[i]);
  return y;
}

// The fp32 kernel on the widened inputs of `a` (default pool layout) equals the reference's
// o and lse, up to fp32 against double accumulation. `threads` as many OpenMP threads, so
// lists are cut into chunks whose states merge.
void expect_f32_kernel_matches(const PagedDecodeArgs& a, const std::vector<uint16_t>& q, const std::vector<uint16_t>& kp,
                               const std::vector<uint16_t>& vp, const std::vector<float>& o_ref,
                               const std::vector<float>& lse_ref, int threads) {
  const std::vector<float> q32 = widen(q), k32 = widen(kp), v32 = widen(vp);
  std::vector<float> o(o_ref.size(), NAN), lse(lse_ref.size(), NAN);
  PagedDecodeArgsF32 f;
  f.batch = a.batch;
  f.num_heads = a.num_heads;
  f.num_kv_heads = a.num_kv_heads;
  f.head_dim = a.head_dim;
  f.page_size = a.page_size;
  f.max_pages_per_seq = a.max_pages_per_seq;
  f.scale = a.scale;
  f.tables_per_kv_head = a.tables_per_kv_head;
  f.q = q32.data();
  f.k_pool = k32.data();
  f.v_pool = v32.data();
  f.page_table = a.page_table;
  f.seq_lens = a.seq_lens;
  f.head_masks = a.head_masks;
  f.o = o.data();
  f.lse = lse.data();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  cpu::paged_decode_attention(f);
  omp_set_num_threads(saved);
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], o_ref[i], 2e-5) << "fp32 kernel, o[" << i << "]";
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse_ref[i])) {
      EXPECT_EQ(lse[i], lse_ref[i]) << "fp32 kernel, lse of an empty key set";
    } else {
      ASSERT_NEAR(lse[i], lse_ref[i], 2e-5) << "fp32 kernel, lse[" << i << "]";
    }
  }
}

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
  const bool lists = form == Form::kPerHeadLists || form == Form::kHeadMasks;
  a.tables_per_kv_head = lists;

  // Page lists and the tokens each query head sees (a masked list: a random subset of the
  // listed pages per head, possibly none).
  std::vector<int32_t> table = pages.table;
  std::vector<int> list_lens = lens;
  std::vector<uint32_t> masks;
  std::vector<std::vector<std::vector<int>>> seen(batch, std::vector<std::vector<int>>(heads));
  if (lists) {
    table.assign(size_t(batch) * hkv * max_pages, 0);
    list_lens.assign(size_t(batch) * hkv, 0);
  }
  if (form == Form::kHeadMasks) masks.assign(size_t(batch) * hkv * max_pages, 0u);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) {
      const int n = pages.pages_of(lens[b], ps);
      int kept = 0;
      for (int i = 0; i < n; ++i) {
        if (lists && i < n - 1 && rng() % 2) continue;
        const size_t slot = a.table_index(b, h) * max_pages + kept;
        if (lists) table[slot] = pages.table[size_t(b) * max_pages + i];
        if (form == Form::kHeadMasks) masks[slot] = uint32_t(rng()) & ((1u << group) - 1);
        for (int g = 0; g < group; ++g)
          if (form != Form::kHeadMasks || (masks[slot] >> g & 1u))
            for (int t = i * ps; t < std::min(lens[b], (i + 1) * ps); ++t) seen[b][h * group + g].push_back(t);
        if (lists) list_lens[a.table_index(b, h)] += std::min(lens[b], (i + 1) * ps) - i * ps;
        ++kept;
      }
    }
  if (form == Form::kHeadMasks) a.head_masks = masks.data();

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
  if (form != Form::kHeadMajor) expect_f32_kernel_matches(a, q, kp, vp, o, lse, 1);
  {  // rows(): the call over sequences [0, 2) and then [2, batch) writes what the whole call wrote
    std::vector<float> o2(o.size(), NAN), lse2(lse.size(), NAN);
    PagedDecodeArgs parts = a;
    parts.o = o2.data();
    parts.lse = lse2.data();
    cpu::paged_decode_attention(parts.rows(0, 2));
    cpu::paged_decode_attention(parts.rows(2, batch));
    for (size_t i = 0; i < o.size(); ++i) ASSERT_EQ(o2[i], o[i]) << "rows(), o[" << i << "]";
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_EQ(lse2[i], lse[i]) << "rows(), lse[" << i << "]";
  }
  {  // q_rows = 1: every row attends with row 0's queries, as a call given row 0's queries in every row
    const size_t row = size_t(heads) * d;
    std::vector<uint16_t> q0(q.size());
    for (int b = 0; b < batch; ++b) std::copy_n(q.begin(), row, q0.begin() + b * row);
    std::vector<float> o_shared(o.size(), NAN), lse_shared(lse.size(), NAN), o_copied(o.size(), NAN),
        lse_copied(lse.size(), NAN);
    PagedDecodeArgs shared = a, copied = a;
    shared.q_rows = 1;
    shared.o = o_shared.data(), shared.lse = lse_shared.data();
    copied.q = q0.data();
    copied.o = o_copied.data(), copied.lse = lse_copied.data();
    cpu::paged_decode_attention(shared);
    cpu::paged_decode_attention(copied);
    for (size_t i = 0; i < o.size(); ++i) ASSERT_EQ(o_shared[i], o_copied[i]) << "q_rows, o[" << i << "]";
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_EQ(lse_shared[i], lse_copied[i]) << "q_rows, lse[" << i << "]";
  }

  // Brute force: o = softmax(scale q.k) v over the tokens seen, in double.
  for (int b = 0; b < batch; ++b)
    for (int hq = 0; hq < heads; ++hq) {
      const int h = hq / group;
      const size_t bh = size_t(b) * heads + hq;
      const std::vector<int>& ts = seen[b][hq];
      if (ts.empty()) {
        EXPECT_TRUE(std::isinf(lse[bh]) && lse[bh] < 0) << "lse of an empty key set, b " << b;
        continue;
      }
      const test::BruteState x = test::brute_force_state(
          q.data() + bh * d, d, a.scale, int(ts.size()), [&](int j) { return k[b][h][ts[size_t(j)]].data(); },
          [&](int j) { return v[b][h][ts[size_t(j)]].data(); });
      for (int e = 0; e < d; ++e) ASSERT_NEAR(o[bh * d + e], x.o[size_t(e)], 1e-5) << "b " << b << " head " << hq << " dim " << e;
      ASSERT_NEAR(lse[bh], x.lse, 1e-5) << "b " << b << " head " << hq;
    }
}

INSTANTIATE_TEST_SUITE_P(Forms, PagedDecodeReference,
                         ::testing::Values(Form::kDefault, Form::kHeadMajor, Form::kPerHeadLists, Form::kHeadMasks),
                         [](const auto& info) {
                           switch (info.param) {
                             case Form::kDefault: return "DefaultPool";
                             case Form::kHeadMajor: return "HeadMajorPool";
                             case Form::kPerHeadLists: return "PerKvHeadLists";
                             default: return "HeadMasks";
                           }
                         });

// Long lists on more threads than lists: the fp32 kernel cuts them into chunks and merges.
TEST(PagedDecodeF32Kernel, SplitListsMatchTheReference) {
  auto& rng = test::rng();
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int d = 64, hkv = 2, group = 3, heads = hkv * group, ps = 16;
  const std::vector<int> lens = {5000, 2100};
  const int batch = int(lens.size());
  const test::ShuffledPages pages = test::shuffled_pages(lens, ps, 2, 1, rng);
  std::vector<uint16_t> q(size_t(batch) * heads * d), kp(size_t(pages.num_pages) * hkv * ps * d), vp(kp.size());
  for (auto* x : {&q, &kp, &vp})
    for (auto& e : *x) e = f32_to_bf16(uni(rng));
  // Per (sequence, KV head), a random subset of the pages, the last one kept.
  std::vector<int32_t> table(size_t(batch) * hkv * pages.stride, 0), list_lens(size_t(batch) * hkv, 0);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) {
      const int n = pages.pages_of(lens[b], ps);
      const size_t list = size_t(b) * hkv + h;
      int kept = 0;
      for (int i = 0; i < n; ++i) {
        if (i < n - 1 && rng() % 4 == 0) continue;
        table[list * pages.stride + kept++] = pages.table[size_t(b) * pages.stride + i];
      }
      list_lens[list] = (kept - 1) * ps + lens[b] - (n - 1) * ps;
    }
  PagedDecodeArgs a;
  a.batch = batch;
  a.num_heads = heads;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.page_size = ps;
  a.max_pages_per_seq = pages.stride;
  a.scale = 1.0f / std::sqrt(float(d));
  a.tables_per_kv_head = true;
  a.q = q.data();
  a.k_pool = kp.data();
  a.v_pool = vp.data();
  a.page_table = table.data();
  a.seq_lens = list_lens.data();
  std::vector<float> o(q.size()), lse(size_t(batch) * heads);
  a.o = o.data();
  a.lse = lse.data();
  cpu::paged_decode_attention(a);
  expect_f32_kernel_matches(a, q, kp, vp, o, lse, 8);
}

// split_rows_for (host code, the GPU forward's split hint): alike lists plan for the batch (0);
// long rows beside short ones count the short ones as fractions of the longest; rows that read
// nothing (Retro's past rows) count nothing.
TEST(SplitRowsFor, CountsTheListsInUnitsOfTheLongest) {
  using V = std::vector<int64_t>;
  auto split = [](const V& t) { return split_rows_for(t); };
  EXPECT_EQ(split({32768, 32768, 32768}), 0);
  EXPECT_EQ(split({}), 0);
  EXPECT_EQ(split({0, 0}), 0);
  EXPECT_EQ(split({32768, 1700, 1700, 1700, 1700, 1700, 1700, 32768}), 3);  // 2 dense + 6 quest at 5%
  EXPECT_EQ(split({32768, 32768, 32768, 1700, 1700}), 4);
  EXPECT_EQ(split({32768, 0}), 1);         // Retro at w = 2: the newest row alone
  EXPECT_EQ(split({1000, 32768, 1000}), 2);
}

}  // namespace
}  // namespace skim
