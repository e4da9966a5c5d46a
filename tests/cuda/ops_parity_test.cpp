// The forward pass's CUDA kernels (backend/cuda/ops.cuh, the cuBLAS projection) against their
// CPU references (backend/cpu/ops.h, the CPU KV cache's digest rule) on fresh random inputs.
// Inputs are rounded to bf16 where the kernel takes bf16, so the reference sees the same
// values; outputs written as bf16 are compared with a bf16 tolerance (2^-8 relative).
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../test_random.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/ops.cuh"
#include "core/dtype.h"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

using cuda::DeviceBuffer;

std::vector<uint16_t> bf16_of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), f32_to_bf16);
  return out;
}

std::vector<float> f32_of(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), bf16_to_f32);
  return out;
}

std::vector<float> rounded(const std::vector<float>& v) { return f32_of(bf16_of(v)); }

// Largest |a - b| / (|b| + floor), the floor keeping near-zero references from dominating.
double max_rel_err(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-2) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::fabs(double(a[i]) - b[i]) / (std::fabs(double(b[i])) + floor));
  return m;
}

constexpr double kBf16Out = 1.0 / 128;  // two bf16 roundings of a value of the same magnitude

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  }
  void sync() { cuda::check(cudaDeviceSynchronize(), "kernel"); }
};

TEST_F(CudaOps, EmbedWidensTheTokensRows) {
  const int vocab = 300, hidden = 192, n = 7;
  std::vector<uint16_t> table = bf16_of(test::random_vector(size_t(vocab) * hidden));
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(test::random_int(0, vocab - 1));
  auto d_table = to_device(table);
  auto d_tokens = to_device(tokens);
  DeviceBuffer<float> x(size_t(n) * hidden);
  cuda::embed(d_table.data(), d_tokens.data(), x.data(), n, hidden, nullptr);
  sync();
  std::vector<float> got = to_host(x);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < hidden; ++i)
      ASSERT_EQ(got[size_t(r) * hidden + i], bf16_to_f32(table[size_t(tokens[r]) * hidden + i]));
}

// Tensor parallelism's vocabulary split: a slice's rows embedded, zeros elsewhere; the gathered
// logits laid out by row as cpu::unpack_vocab_slices lays them (the last slice padded).
TEST_F(CudaOps, VocabularySlicesEmbedAndUnpackAsTheCpu) {
  const int vocab = 301, hidden = 64, n = 9, ranks = 3, stride = (vocab + ranks - 1) / ranks, begin = 101, rows = 100;
  std::vector<uint16_t> table = bf16_of(test::random_vector(size_t(rows) * hidden));
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(test::random_int(0, vocab - 1));
  auto d_table = to_device(table);
  auto d_tokens = to_device(tokens);
  DeviceBuffer<float> x(size_t(n) * hidden);
  cuda::embed_vocab_slice(d_table.data(), d_tokens.data(), x.data(), n, hidden, begin, rows, nullptr);
  std::vector<float> gathered = test::random_vector(size_t(ranks) * n * stride), want(size_t(n) * vocab);
  cpu::unpack_vocab_slices(gathered.data(), ranks, n, stride, vocab, want.data());
  auto d_gathered = to_device(gathered);
  DeviceBuffer<float> logits(size_t(n) * vocab);
  cuda::unpack_vocab_slices(d_gathered.data(), ranks, n, stride, vocab, logits.data(), nullptr);
  sync();
  const std::vector<float> got_x = to_host(x);
  for (int r = 0; r < n; ++r) {
    const int t = tokens[size_t(r)] - begin;
    for (int i = 0; i < hidden; ++i)
      ASSERT_EQ(got_x[size_t(r) * hidden + i], t >= 0 && t < rows ? bf16_to_f32(table[size_t(t) * hidden + i]) : 0.0f);
  }
  EXPECT_EQ(to_host(logits), want);
}

TEST_F(CudaOps, AddRmsnormMatchesAddInplaceThenRmsnorm) {
  // 64 to 4096 on 256 threads, 8192 on 1024 (float4s kept in registers), 576 (SmolLM2: part of a
  // block idle), 130 and 70000 the scalar kernel.
  for (int dim : {64, 512, 576, 4096, 8192, 130, 70000}) {
    for (bool with_y : {false, true}) {
      const int n = test::random_int(1, 9);
      std::vector<float> x = test::random_vector(size_t(n) * dim, 3.0f);
      std::vector<float> y = test::random_vector(size_t(n) * dim);
      std::vector<float> w = test::random_vector(size_t(dim));
      auto dx = to_device(x), dy = to_device(y), dw = to_device(w);
      DeviceBuffer<uint16_t> out(size_t(n) * dim);
      cuda::add_rmsnorm(dx.data(), with_y ? dy.data() : nullptr, dw.data(), out.data(), n, dim, 1e-5f, nullptr);
      sync();
      if (with_y) cpu::add_inplace(x.data(), y.data(), int64_t(n) * dim);
      std::vector<float> want(x.size());
      cpu::rmsnorm(x.data(), w.data(), want.data(), n, dim, 1e-5f);
      EXPECT_LT(max_rel_err(to_host(dx), x, 1e-3), 1e-5) << "residual, dim " << dim;
      EXPECT_LT(max_rel_err(f32_of(to_host(out)), want), kBf16Out) << "dim " << dim << " y " << with_y;
    }
  }
}

TEST_F(CudaOps, GatherRowsCopiesTheListedRows) {
  const int n = 10, dim = 130;
  std::vector<uint16_t> in = bf16_of(test::random_vector(size_t(n) * dim));
  std::vector<int32_t> rows = {9, 0, 4, 4};
  auto d_in = to_device(in);
  auto d_rows = to_device(rows);
  DeviceBuffer<uint16_t> out(rows.size() * dim);
  cuda::gather_rows(d_in.data(), d_rows.data(), out.data(), int(rows.size()), dim, nullptr);
  sync();
  std::vector<uint16_t> got = to_host(out);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int j = 0; j < dim; ++j) ASSERT_EQ(got[i * dim + j], in[size_t(rows[i]) * dim + j]);
}

// I % 4 == 0 takes four elements a thread (1000, and the 8B shape's 14336 over several passes of
// a block), else one (1001).
TEST_F(CudaOps, SiluMulMatchesCpu) {
  for (int I : {1000, 1001, 14336}) {
    SCOPED_TRACE(testing::Message() << "I " << I);
    const int n = 5;
    std::vector<float> gu = test::random_vector(size_t(n) * 2 * I, 2.0f);
    auto d = to_device(gu);
    DeviceBuffer<uint16_t> out(size_t(n) * I);
    cuda::silu_mul(d.data(), out.data(), n, I, nullptr);
    sync();
    std::vector<float> want(size_t(n) * I);
    for (int r = 0; r < n; ++r)
      cpu::silu_mul(gu.data() + size_t(r) * 2 * I, gu.data() + size_t(r) * 2 * I + I, want.data() + size_t(r) * I, I);
    EXPECT_LT(max_rel_err(f32_of(to_host(out)), want), kBf16Out);
  }
}

TEST_F(CudaOps, LinearMatchesCpuOnBf16Inputs) {
  cuda::Gemm gemm;
  for (auto [out_dim, in_dim, n] : {std::tuple{384, 512, 1}, {1536, 512, 3}, {512, 1536, 8}, {1001, 512, 5}, {8192, 512, 37}}) {
    std::vector<float> x = rounded(test::random_vector(size_t(n) * in_dim));
    Matrix W;
    W.dtype = DType::BF16;
    W.rows = out_dim;
    W.cols = in_dim;
    W.bf16 = bf16_of(test::random_vector(size_t(out_dim) * in_dim, 1.0f / std::sqrt(float(in_dim))));
    cuda::GpuMatrix gw;
    gw.rows = out_dim;
    gw.cols = in_dim;
    cuda::upload(gw.data, W.bf16.data(), W.bf16.size());
    auto dx = to_device(bf16_of(x));
    DeviceBuffer<float> y(size_t(n) * out_dim);
    gemm.linear(dx.data(), gw, y.data(), n, nullptr);
    sync();
    std::vector<float> want(size_t(n) * out_dim);
    cpu::linear(x.data(), W, nullptr, want.data(), n);
    // fp32 accumulation on both sides, different orders.
    EXPECT_LT(max_rel_err(to_host(y), want, 1e-1), 1e-4) << out_dim << "x" << in_dim << " n " << n;
  }
}

// Both GEMV kernels (the FMA one and the tensor-core one), every row count, against the CPU:
// outputs not a multiple of the MMA's 16 rows, inputs not a multiple of its 32-wide steps, a
// long input (the down projection's split over 8 warps), the x rows past n never read.
TEST_F(CudaOps, GemvKernelsMatchCpu) {
  for (auto [out_dim, in_dim] : {std::pair{1001, 520}, {64, 4104}, {17, 14336}, {2048, 256}}) {
    Matrix W;
    W.dtype = DType::BF16;
    W.rows = out_dim;
    W.cols = in_dim;
    W.bf16 = bf16_of(test::random_vector(size_t(out_dim) * in_dim, 1.0f / std::sqrt(float(in_dim))));
    auto dw = to_device(W.bf16);
    for (int n = 1; n <= cuda::kGemvMaxRows; ++n) {
      std::vector<float> x = rounded(test::random_vector(size_t(n) * in_dim));
      std::vector<float> want(size_t(n) * out_dim);
      cpu::linear(x.data(), W, nullptr, want.data(), n);
      auto dx = to_device(bf16_of(x));  // exactly n rows: a read past them would be out of bounds
      for (auto kind : {cuda::GemvKernel::kFma, cuda::GemvKernel::kMma}) {
        DeviceBuffer<float> y(size_t(n) * out_dim);
        cuda::check(cudaMemset(y.data(), 0xff, y.bytes()), "cudaMemset");  // NaN: unwritten outputs fail
        ASSERT_TRUE(cuda::gemv_with(dx.data(), dw.data(), y.data(), n, out_dim, in_dim, kind, nullptr));
        sync();
        const std::vector<float> got = to_host(y);
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); }));
        // fp32 accumulation on both sides, different orders.
        EXPECT_LT(max_rel_err(got, want, 1e-1), 1e-4)
            << out_dim << "x" << in_dim << " n " << n << (kind == cuda::GemvKernel::kMma ? " mma" : " fma");
      }
    }
  }
}

// A paged cache on the host mirroring the device pools, for the QKV and digest kernels.
struct Pages {
  int num_pages, kv_heads, d, page = 16;
  size_t at(int p, int h, int slot) const { return ((size_t(p) * kv_heads + h) * page + slot) * d; }
};

TEST_F(CudaOps, QkvRopeAppendMatchesCpuRopeAndCacheWrite) {
  struct Case { int heads, kv_heads, d; bool bias, qk_norm; };
  for (Case c : {Case{4, 1, 128, false, false}, Case{8, 8, 64, true, false}, Case{32, 8, 128, false, true},
                 Case{16, 2, 64, true, true}, Case{6, 3, 128, true, true}}) {  // 9 heads: a group part-filled
    SCOPED_TRACE(testing::Message() << c.heads << "/" << c.kv_heads << " d " << c.d << " bias " << c.bias
                                    << " qk_norm " << c.qk_norm);
    const int n = test::random_int(1, 6), q_dim = c.heads * c.d, kv_dim = c.kv_heads * c.d;
    const int width = q_dim + 2 * kv_dim, maxp = 8;
    Pages pg{2 * maxp * n, c.kv_heads, c.d};
    std::vector<float> qkv = test::random_vector(size_t(n) * width);
    std::vector<float> bias = test::random_vector(size_t(width), 0.5f);
    std::vector<float> qn = test::random_vector(size_t(c.d)), kn = test::random_vector(size_t(c.d));
    RopeConfig rope;
    rope.theta = 500000.0f;
    std::vector<float> inv_freq(size_t(c.d / 2));
    rope_inv_freq(rope, c.d, inv_freq.data());
    // Each row its own sequence with its own pages (page-unaligned positions).
    std::vector<int32_t> positions, table(size_t(n) * maxp);
    for (int r = 0; r < n; ++r) {
      positions.push_back(test::random_int(0, maxp * pg.page - 1));
      for (int i = 0; i < maxp; ++i) table[size_t(r) * maxp + i] = r * maxp + (maxp - 1 - i);
    }
    auto d_qkv = to_device(qkv), d_bias = to_device(bias), d_qn = to_device(qn), d_kn = to_device(kn);
    auto d_freq = to_device(inv_freq);
    auto d_pos = to_device(positions), d_table = to_device(table);
    DeviceBuffer<uint16_t> q(size_t(n) * q_dim), k(size_t(pg.num_pages) * kv_dim * pg.page),
        v(size_t(pg.num_pages) * kv_dim * pg.page);
    cuda::QkvRopeAppendArgs a;
    a.qkv = d_qkv.data();
    a.bias = c.bias ? d_bias.data() : nullptr;
    a.q_norm = c.qk_norm ? d_qn.data() : nullptr;
    a.k_norm = c.qk_norm ? d_kn.data() : nullptr;
    a.eps = 1e-6f;
    a.inv_freq = d_freq.data();
    a.positions = d_pos.data();
    a.page_table = d_table.data();
    a.max_pages_per_seq = maxp;
    a.n = n;
    a.num_heads = c.heads;
    a.num_kv_heads = c.kv_heads;
    a.head_dim = c.d;
    a.q = q.data();
    a.k_pool = k.data();
    a.v_pool = v.data();
    cuda::qkv_rope_append(a, nullptr);
    sync();

    // Reference: bias, per-head norm, RoPE on the CPU.
    std::vector<float> rq(size_t(n) * q_dim), rk(size_t(n) * kv_dim), rv(size_t(n) * kv_dim);
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < width; ++j) {
        float x = qkv[size_t(r) * width + j] + (c.bias ? bias[size_t(j)] : 0.0f);
        if (j < q_dim) rq[size_t(r) * q_dim + j] = x;
        else if (j < q_dim + kv_dim) rk[size_t(r) * kv_dim + j - q_dim] = x;
        else rv[size_t(r) * kv_dim + j - q_dim - kv_dim] = x;
      }
    if (c.qk_norm) {
      cpu::rmsnorm(rq.data(), qn.data(), rq.data(), n * c.heads, c.d, 1e-6f);
      cpu::rmsnorm(rk.data(), kn.data(), rk.data(), n * c.kv_heads, c.d, 1e-6f);
    }
    cpu::rope(rq.data(), positions.data(), inv_freq.data(), n, c.heads, c.d);
    cpu::rope(rk.data(), positions.data(), inv_freq.data(), n, c.kv_heads, c.d);

    EXPECT_LT(max_rel_err(f32_of(to_host(q)), rq), kBf16Out);
    std::vector<float> gk = f32_of(to_host(k)), gv = f32_of(to_host(v)), ck, cv;
    for (int r = 0; r < n; ++r) {
      const int p = table[size_t(r) * maxp + positions[r] / pg.page], slot = positions[r] % pg.page;
      for (int h = 0; h < c.kv_heads; ++h) {
        ck.insert(ck.end(), gk.begin() + pg.at(p, h, slot), gk.begin() + pg.at(p, h, slot) + c.d);
        cv.insert(cv.end(), gv.begin() + pg.at(p, h, slot), gv.begin() + pg.at(p, h, slot) + c.d);
      }
    }
    EXPECT_LT(max_rel_err(ck, rk), kBf16Out);
    EXPECT_LT(max_rel_err(cv, rv), kBf16Out);
  }
}

TEST_F(CudaOps, PageDigestIsMinMaxOfTheWrittenKeys) {
  // One sequence's prefill chunk crossing page boundaries at an unaligned start, then a
  // decode batch of two sequences: each written page's digest covers slots [0, last write].
  const int kv_heads = 2, d = 64, page = 16, maxp = 6, num_pages = 12;
  Pages pg{num_pages, kv_heads, d};
  std::vector<uint16_t> k = bf16_of(test::random_vector(size_t(num_pages) * kv_heads * page * d));
  auto d_k = to_device(k);
  // bf16 digests, poisoned with 99 / -99 where no page was written.
  auto kmin = to_device(std::vector<uint16_t>(size_t(num_pages) * kv_heads * d, f32_to_bf16(99.0f)));
  auto kmax = to_device(std::vector<uint16_t>(size_t(num_pages) * kv_heads * d, f32_to_bf16(-99.0f)));

  std::vector<int32_t> seq_a = {5, 2, 9, 0, 1, 3}, seq_b = {11, 10, 8, 7, 6, 4};
  std::vector<int32_t> positions, table;
  for (int p = 13; p < 13 + 40; ++p) {  // pages 0..3 of sequence a
    positions.push_back(p);
    table.insert(table.end(), seq_a.begin(), seq_a.end());
  }
  auto run = [&](const std::vector<int32_t>& pos, const std::vector<int32_t>& tab) {
    auto d_pos = to_device(pos), d_tab = to_device(tab);
    cuda::page_digest(d_k.data(), kmin.data(), kmax.data(), d_pos.data(), d_tab.data(), maxp, int(pos.size()),
                      kv_heads, d, page, nullptr);
    sync();
  };
  run(positions, table);
  std::vector<int32_t> decode_tab = seq_a;
  decode_tab.insert(decode_tab.end(), seq_b.begin(), seq_b.end());
  run({53, 70}, decode_tab);  // a: page 3 slot 5; b: page 4 slot 6

  std::vector<float> mn, mx;
  for (uint16_t x : to_host(kmin)) mn.push_back(bf16_to_f32(x));
  for (uint16_t x : to_host(kmax)) mx.push_back(bf16_to_f32(x));
  auto expect_digest = [&](int p, int slots) {
    for (int h = 0; h < kv_heads; ++h)
      for (int i = 0; i < d; ++i) {
        float lo = INFINITY, hi = -INFINITY;
        for (int t = 0; t < slots; ++t) {
          float v = bf16_to_f32(k[pg.at(p, h, t) + i]);
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        const size_t at = (size_t(p) * kv_heads + h) * d + i;
        ASSERT_EQ(mn[at], lo) << "page " << p;
        ASSERT_EQ(mx[at], hi) << "page " << p;
      }
  };
  expect_digest(seq_a[0], 16);
  expect_digest(seq_a[1], 16);
  expect_digest(seq_a[2], 16);
  expect_digest(seq_a[3], 6);  // positions 48..53
  expect_digest(seq_b[4], 7);  // position 70: page 4, slots 0..6
  EXPECT_EQ(mn[size_t(seq_b[0]) * kv_heads * d], 99.0f) << "an unwritten page's digest is untouched";
}

// Vocabularies of 16-byte rows read four at a time (5000; 128256, Llama 3's, through the unrolled
// loads) and one element at a time (5001).
TEST_F(CudaOps, ArgmaxTakesTheFirstMaximumAndAdvances) {
  for (int vocab : {5000, 128256, 5001}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const int n = 3;
    std::vector<float> logits = test::random_vector(size_t(n) * vocab);
    logits[size_t(0) * vocab + 4000] = 50.0f;
    logits[size_t(1) * vocab + 17] = 60.0f;
    logits[size_t(1) * vocab + 3000] = 60.0f;  // a tie: the first wins, as std::max_element
    logits[size_t(2) * vocab + vocab - 1] = 70.0f;  // the last element
    auto d = to_device(logits);
    DeviceBuffer<int32_t> next{size_t(n)};
    std::vector<int32_t> tokens = {1, 2, 3}, pos = {10, 20, 30}, lens = {11, 21, 31};
    auto dt = to_device(tokens), dp = to_device(pos), dl = to_device(lens);
    cuda::DecodeState st{dt.data(), dp.data(), dl.data()};
    cuda::argmax(d.data(), n, vocab, next.data(), &st, nullptr);
    sync();
    std::vector<int32_t> got = to_host(next);
    EXPECT_EQ(got[0], 4000);
    EXPECT_EQ(got[1], 17);
    EXPECT_EQ(got[2], vocab - 1);
    EXPECT_EQ(to_host(dt), got);
    EXPECT_EQ(to_host(dp), (std::vector<int32_t>{11, 21, 31}));
    EXPECT_EQ(to_host(dl), (std::vector<int32_t>{12, 22, 32}));
  }
}

// The CPU sampler's candidate set and probabilities (engine/sampler.cpp): descending order,
// top-k, softmax at the temperature, the shortest prefix whose mass reaches top_p.
std::vector<double> sampler_distribution(const std::vector<float>& logits, const cuda::SampleParams& p) {
  const int n = int(logits.size());
  std::vector<int> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[size_t(i)] = i;
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const int k = p.top_k > 0 ? std::min(p.top_k, n) : n;
  std::vector<double> w(static_cast<size_t>(k));
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += w[i] = std::exp((logits[ids[i]] - logits[ids[0]]) / p.temperature);
  int keep = k;
  double acc = 0;
  for (int i = 0; p.top_p < 1.0f && i < k; ++i)
    if ((acc += w[i] / sum) >= p.top_p) {
      keep = i + 1;
      break;
    }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += w[i];
  std::vector<double> dist(static_cast<size_t>(n), 0.0);
  for (int i = 0; i < keep; ++i) dist[size_t(ids[i])] = w[i] / kept;
  return dist;
}

// One draw per row of `rows` (draws rows of `vocab` logits, on the device) under p at steps
// 0, 1, ...; drawn twice: the same seed and step must give the same token.
std::vector<int32_t> draw_rows(const DeviceBuffer<float>& rows, int draws, int vocab, cuda::SampleParams p) {
  std::vector<cuda::SampleParams> params;
  for (int r = 0; r < draws; ++r) {
    p.step = uint64_t(r);
    params.push_back(p);
  }
  auto d_params = to_device(params);
  DeviceBuffer<int32_t> next{size_t(draws)};
  cuda::sample(rows.data(), draws, vocab, d_params.data(), next.data(), nullptr);
  cuda::check(cudaDeviceSynchronize(), "sample");
  const std::vector<int32_t> got = to_host(next);
  cuda::sample(rows.data(), draws, vocab, d_params.data(), next.data(), nullptr);
  cuda::check(cudaDeviceSynchronize(), "sample");
  EXPECT_EQ(to_host(next), got) << "same seed and step, same token";
  return got;
}

TEST_F(CudaOps, SampleDrawsFromTheCpuSamplersDistribution) {
  const int vocab = 64, draws = 20000;
  std::vector<float> logits = test::random_vector(size_t(vocab), 2.0f);
  std::vector<float> rows;
  for (int r = 0; r < draws; ++r) rows.insert(rows.end(), logits.begin(), logits.end());
  auto d_logits = to_device(rows);
  for (cuda::SampleParams p : {cuda::SampleParams{0.8f, 10, 1.0f, 11, 0}, cuda::SampleParams{1.2f, 0, 0.7f, 12, 0},
                               cuda::SampleParams{0.5f, 5, 0.5f, 13, 0}, cuda::SampleParams{1.0f, 0, 1.0f, 14, 0}}) {
    SCOPED_TRACE(testing::Message() << "T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p);
    const std::vector<int32_t> got = draw_rows(d_logits, draws, vocab, p);
    std::vector<double> want = sampler_distribution(logits, p);
    std::vector<int> count(static_cast<size_t>(vocab), 0);
    for (int t : got) {
      ASSERT_TRUE(t >= 0 && t < vocab);
      ASSERT_GT(want[size_t(t)], 0.0) << "token " << t << " is outside the sampler's candidates";
      ++count[size_t(t)];
    }
    for (int t = 0; t < vocab; ++t) {  // within 5 standard deviations of a binomial count
      const double q = want[size_t(t)], sd = std::sqrt(draws * q * (1 - q));
      EXPECT_NEAR(count[size_t(t)], draws * q, 5 * sd + 2) << "token " << t;
    }
  }
}

// A vocabulary of 40000: top-k by radix select (k under and over the nucleus's candidate room
// of 4096), the nucleus over the 4096 largest logits when they hold it (peaked logits) and over
// the vocabulary when they do not (flat ones); every draw inside the CPU sampler's candidates,
// and the same token again for the same seed and step.
TEST_F(CudaOps, SampleCutsALargeVocabularyAsTheCpuSampler) {
  const int vocab = 40000, draws = 400;
  for (bool peaked : {true, false}) {
    std::vector<float> logits = test::random_vector(size_t(vocab), peaked ? 1.0f : 0.05f);
    if (peaked)
      for (int t = 0; t < vocab; t += 97) logits[size_t(t)] += 12.0f;  // about 400 tokens hold the mass
    std::vector<float> rows;
    for (int r = 0; r < draws; ++r) rows.insert(rows.end(), logits.begin(), logits.end());
    auto d_logits = to_device(rows);
    for (cuda::SampleParams p : {cuda::SampleParams{1.0f, 100, 1.0f, 21, 0}, cuda::SampleParams{1.0f, 0, 0.9f, 22, 0},
                                 cuda::SampleParams{1.0f, 10000, 0.5f, 23, 0}, cuda::SampleParams{0.7f, 5000, 0.95f, 24, 0}}) {
      SCOPED_TRACE(testing::Message() << "peaked " << peaked << " top_k " << p.top_k << " top_p " << p.top_p);
      const std::vector<int32_t> got = draw_rows(d_logits, draws, vocab, p);
      const std::vector<double> want = sampler_distribution(logits, p);
      for (int t : got) {
        ASSERT_TRUE(t >= 0 && t < vocab);
        ASSERT_GT(want[size_t(t)], 0.0) << "token " << t << " is outside the sampler's candidates";
      }
    }
  }
}

TEST_F(CudaOps, SampleAtTemperatureZeroIsArgmax) {
  const int n = 4, vocab = 3000;
  std::vector<float> logits = test::random_vector(size_t(n) * vocab);
  logits[size_t(2) * vocab + 7] = logits[size_t(2) * vocab + 2000] = 40.0f;  // a tie: the first
  std::vector<cuda::SampleParams> params(static_cast<size_t>(n));
  auto d_logits = to_device(logits);
  auto d_params = to_device(params);
  DeviceBuffer<int32_t> next{size_t(n)};
  cuda::sample(d_logits.data(), n, vocab, d_params.data(), next.data(), nullptr);
  sync();
  std::vector<int32_t> got = to_host(next);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(got[size_t(r)], int(std::max_element(logits.begin() + size_t(r) * vocab, logits.begin() + size_t(r + 1) * vocab) -
                                  (logits.begin() + size_t(r) * vocab)));
  EXPECT_EQ(got[2], 7);
}

}  // namespace
}  // namespace skim
