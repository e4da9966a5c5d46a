// cpu::token_decode_attention (the oracle of a token-gather CUDA kernel, CSAttention's) against a
// brute-force softmax over each query head's chosen tokens, with lists shared by the GQA group
// and lists per query head, shuffled pages, empty lists; and the fp32 kernel the CPU engine runs
// (same name, TokenDecodeArgsF32) against the reference on the same bf16-exact inputs, on one
// thread and on several (long lists are cut into chunks whose states merge).
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "attention/token_decode_args.h"
#include "backend/cpu/token_decode_attention.h"
#include "core/dtype.h"
#include "brute_force_state.h"
#include "../token_decode_case.h"

namespace skim {
namespace {

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_f32(x[i]);
  return y;
}

class TokenDecode : public ::testing::TestWithParam<bool> {};

// A batch of four, and one long sequence (fewer lists than threads: the fp32 kernel splits them).
TEST_P(TokenDecode, ReferenceMatchesBruteForceAndTheF32KernelMatchesIt) {
  for (const std::vector<int>& lens : {std::vector<int>{1, 300, 57, 700}, std::vector<int>{2000}}) {
    test::TokenCase c = test::make_token_case(GetParam(), lens);
    PagedDecodeArgs& a = c.t.attn;
    const int d = c.d, heads = c.heads();
    std::vector<float> o(c.q.size(), NAN), lse(size_t(a.batch) * heads, NAN);
    a.o = o.data();
    a.lse = lse.data();
    cpu::token_decode_attention(c.t);

    for (int b = 0; b < a.batch; ++b)
      for (int hq = 0; hq < heads; ++hq) {
        const size_t bh = size_t(b) * heads + hq, list = c.t.list_index(b, hq);
        const int n = c.list_lens[list];
        const int32_t* ts = c.lists.data() + list * c.t.max_tokens;
        if (n == 0) {
          EXPECT_TRUE(std::isinf(lse[bh]) && lse[bh] < 0) << "lse of an empty list";
          EXPECT_EQ(o[bh * d], 0.0f);
          continue;
        }
        const int h = hq / c.group;
        const test::BruteState x = test::brute_force_state(
            c.q.data() + bh * d, d, a.scale, n, [&](int j) { return c.key(c.kp, b, h, ts[j]); },
            [&](int j) { return c.key(c.vp, b, h, ts[j]); });
        for (int e = 0; e < d; ++e) ASSERT_NEAR(o[bh * d + e], x.o[size_t(e)], 1e-5) << "b " << b << " head " << hq << " dim " << e;
        ASSERT_NEAR(lse[bh], x.lse, 1e-5) << "b " << b << " head " << hq;
      }

    const std::vector<float> q32 = widen(c.q), k32 = widen(c.kp), v32 = widen(c.vp);
    for (int threads : {1, 3}) {
      std::vector<float> o32(o.size(), NAN), lse32(lse.size(), NAN);
      TokenDecodeArgsF32 f{.attn = {.batch = a.batch, .num_heads = a.num_heads, .num_kv_heads = a.num_kv_heads,
                                    .head_dim = a.head_dim, .page_size = a.page_size,
                                    .max_pages_per_seq = a.max_pages_per_seq, .scale = a.scale, .q = q32.data(),
                                    .k_pool = k32.data(), .v_pool = v32.data(), .page_table = a.page_table,
                                    .seq_lens = a.seq_lens, .o = o32.data(), .lse = lse32.data()},
                           .max_tokens = c.t.max_tokens, .lists_per_query_head = c.t.lists_per_query_head,
                           .token_lists = c.t.token_lists, .token_lens = c.t.token_lens};
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      cpu::token_decode_attention(f);
      omp_set_num_threads(saved);
      for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o32[i], o[i], 2e-5) << "fp32 kernel, " << threads << " threads, o[" << i << "]";
      for (size_t i = 0; i < lse.size(); ++i) {
        if (std::isinf(lse[i]))
          EXPECT_EQ(lse32[i], lse[i]) << "fp32 kernel, lse of an empty list";
        else
          ASSERT_NEAR(lse32[i], lse[i], 2e-5) << "fp32 kernel, " << threads << " threads, lse[" << i << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Lists, TokenDecode, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "PerQueryHead" : "SharedByTheGroup"; });

TEST(TokenDecode, RefusesListsOutOfOrderOrPastTheSequence) {
  test::TokenCase c = test::make_token_case(false);
  std::vector<float> o(c.q.size()), lse(size_t(c.t.attn.batch) * c.heads());
  c.t.attn.o = o.data();
  c.t.attn.lse = lse.data();
  const size_t l = 3;  // sequence 1 (300 tokens), KV head 1
  int32_t* list = c.lists.data() + l * c.t.max_tokens;
  c.list_lens[l] = 2;
  list[0] = 9;
  list[1] = 4;  // descending
  EXPECT_THROW(cpu::token_decode_attention(c.t), std::invalid_argument);
  list[1] = 300;  // the sequence's length: a slot no token owns
  EXPECT_THROW(cpu::token_decode_attention(c.t), std::invalid_argument);
  c.list_lens[l] = c.t.max_tokens + 1;
  EXPECT_THROW(cpu::token_decode_attention(c.t), std::invalid_argument);
}

}  // namespace
}  // namespace skim
