// cuda::token_decode_attention on a token decode case's inputs (../token_decode_case.h), for the
// CUDA tests: the page tables, their lengths and the token lists given, uploaded with the
// queries and pools; run
// twice on one workspace (the second call must be bitwise equal); the outputs back.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "../token_decode_case.h"
#include "backend/cuda/token_decode_attention.cuh"
#include "device_vectors.h"

namespace skim::test {

struct TokenDecodeGpuRun {
  std::vector<float> o, lse;
};

// t: the case's arguments; its host pointers are replaced by device copies of c's q and pools and of table, seq_lens and lists.
inline TokenDecodeGpuRun run_token_decode_on_gpu(const TokenCase& c, TokenDecodeArgs t, const std::vector<int32_t>& table,
                                                 const std::vector<int32_t>& seq_lens,
                                                 const std::vector<int32_t>& lists) {
  auto q = to_device(c.q), kp = to_device(c.kp), vp = to_device(c.vp);
  auto dtable = to_device(table), dlens = to_device(seq_lens), dlists = to_device(lists), list_lens = to_device(c.list_lens);
  cuda::DeviceBuffer<float> o(c.q.size()), lse(size_t(c.t.attn.batch) * c.heads());
  t.attn.q = q.data();
  t.attn.k_pool = kp.data();
  t.attn.v_pool = vp.data();
  t.attn.page_table = dtable.data();
  t.attn.seq_lens = dlens.data();
  t.attn.o = o.data();
  t.attn.lse = lse.data();
  t.token_lists = dlists.data();
  t.token_lens = list_lens.data();
  const size_t ws_bytes = cuda::token_decode_workspace_size(t);
  cuda::DeviceBuffer<unsigned char> ws(std::max<size_t>(ws_bytes, 1));
  t.attn.workspace = ws.data();
  t.attn.workspace_bytes = ws_bytes;
  EXPECT_EQ(cuda::token_decode_attention(t, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  TokenDecodeGpuRun r{to_host(o), to_host(lse)};
  EXPECT_EQ(cuda::token_decode_attention(t, nullptr), cudaSuccess);  // again, on the same workspace
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(o), r.o) << "a second call differs";
  return r;
}

}  // namespace skim::test
