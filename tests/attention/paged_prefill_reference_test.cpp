// cpu::paged_prefill_attention (the oracle of the CUDA prefill kernels) against a brute-force
// causal softmax in double, row by row: one sequence whose rows start and end inside pages, and
// several sequences in one call (PagedPrefillArgs::seq_rows, a table per row), GQA groups 1, 3
// and 4, shuffled page ids, fresh random bf16 inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "../test_random.h"
#include "attention/paged_prefill_args.h"
#include "backend/cpu/paged_prefill_attention.h"
#include "brute_force_state.h"
#include "core/dtype.h"

namespace skim {
namespace {

std::vector<uint16_t> random_bf16(size_t n) {
  const std::vector<float> f = test::random_vector(n);
  std::vector<uint16_t> out(n);
  std::transform(f.begin(), f.end(), out.begin(), f32_to_bf16);
  return out;
}

struct Seq {
  int start, rows;
};

// Runs the reference over `seqs` (one call; seq_rows when there are several) and checks every
// row against the brute force over its own sequence's keys [0, position].
void check(int d, int kv_heads, int group, const std::vector<Seq>& seqs) {
  const int heads = kv_heads * group, ps = 16, num_seqs = int(seqs.size());
  int n = 0, max_pos = 0;
  for (const Seq& s : seqs) n += s.rows, max_pos = std::max(max_pos, s.start + s.rows - 1);
  const int stride = max_pos / ps + 1, pool_pages = num_seqs * stride;
  std::vector<int32_t> ids(static_cast<size_t>(pool_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), test::rng());
  const std::vector<uint16_t> q = random_bf16(size_t(n) * heads * d);
  const std::vector<uint16_t> k = random_bf16(size_t(pool_pages) * kv_heads * ps * d), v = random_bf16(k.size());
  std::vector<int32_t> tables, positions, seq_rows = {0}, seq_of_row;
  for (int s = 0; s < num_seqs; ++s) {
    for (int r = 0; r < seqs[size_t(s)].rows; ++r) {
      tables.insert(tables.end(), ids.begin() + s * stride, ids.begin() + (s + 1) * stride);
      positions.push_back(seqs[size_t(s)].start + r);
      seq_of_row.push_back(s);
    }
    seq_rows.push_back(seq_rows.back() + seqs[size_t(s)].rows);
  }
  std::vector<float> o(q.size(), NAN), lse(size_t(n) * heads, NAN);
  PagedPrefillArgs a;
  a.n = n;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = d;
  a.max_position = max_pos;
  a.scale = 1.0f / std::sqrt(float(d));
  a.q = q.data();
  a.k_pool = k.data();
  a.v_pool = v.data();
  a.page_table = num_seqs > 1 ? tables.data() : ids.data();
  a.positions = positions.data();
  if (num_seqs > 1) {
    a.num_seqs = num_seqs;
    a.seq_rows = seq_rows.data();
    a.table_stride = stride;
  }
  a.o = o.data();
  a.lse = lse.data();
  cpu::paged_prefill_attention(a);

  double o_err = 0, lse_err = 0;
  for (int r = 0; r < n; ++r) {
    const int32_t* table = ids.data() + size_t(seq_of_row[size_t(r)]) * stride;
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / group;
      auto row = [&](const std::vector<uint16_t>& pool, int j) {
        return pool.data() + ((size_t(table[j / ps]) * kv_heads + kvh) * ps + j % ps) * d;
      };
      const test::BruteState want = test::brute_force_state(
          q.data() + (size_t(r) * heads + h) * d, d, a.scale, positions[size_t(r)] + 1,
          [&](int j) { return row(k, j); }, [&](int j) { return row(v, j); });
      auto worst = [](double err, double got, double want_value) {
        const double e = std::fabs(got - want_value);
        return std::isnan(e) ? INFINITY : std::max(err, e);  // a row left unwritten (NaN) fails
      };
      for (int e = 0; e < d; ++e) o_err = worst(o_err, o[(size_t(r) * heads + h) * d + e], want.o[size_t(e)]);
      lse_err = worst(lse_err, lse[size_t(r) * heads + h], want.lse);
    }
  }
  EXPECT_LT(o_err, 1e-4);  // fp32 against double
  EXPECT_LT(lse_err, 1e-4);
}

TEST(PagedPrefillReference, OneSequenceMatchesBruteForce) {
  check(64, 2, 4, {{5, 40}});
  check(128, 1, 3, {{0, 37}});
}

TEST(PagedPrefillReference, SeveralSequencesEachOverTheirOwnKeys) {
  check(64, 2, 4, {{300, 17}, {0, 0}, {70, 33}, {1000, 1}});
  check(128, 3, 1, {{15, 16}, {100, 9}});
}

}  // namespace
}  // namespace skim
