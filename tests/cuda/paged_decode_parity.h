// Parity of skim::cuda::paged_decode_attention against the CPU reference on fresh random
// inputs, shared by the GoogleTest suite (paged_decode_attention_test.cpp) and the gtest-free
// driver for the GPU machine (paged_decode_parity_main.cc).
//
// Each case builds a cache whose pages are a shuffled permutation of the pool, fills every
// cache row no sequence owns (page tails past seq_len, spare pages) with NaN and the unused
// page-table slots with out-of-range ids, poisons outputs and workspace with NaN, runs the
// kernel twice (the two results must agree bit for bit: a differing rerun means a race) and
// compares with the double-precision reference. The workspace is zeroed once only, so the
// second run also checks that the first left its page counters at zero.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/paged_decode_args.h"
#include "backend/cpu/paged_decode_attention.h"
#include "backend/cuda/paged_decode_attention.cuh"
#include "core/dtype.h"
#include "../shuffled_pages.h"

namespace skim::test {

struct ParityCase {
  int head_dim = 128;
  int group = 4;
  int num_kv_heads = 2;
  std::vector<int> lens;
  float q_scale = 1.0f;  // query magnitude: larger gives sharper softmax
  bool deterministic = true;  // PagedDecodeArgs::deterministic
  bool head_major = false;    // pool [kv_head][page][token][dim] (PagedDecodeArgs strides)
  bool per_head_lists = false;  // each (sequence, KV head) a random subset of its pages
  bool head_masks = false;      // with per_head_lists: a random page mask per query head
  int split_rows = 0;           // PagedDecodeArgs::split_rows
  int q_rows = 0;               // PagedDecodeArgs::q_rows

  std::string name() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "d%d_g%d_kv%d_q%g_len", head_dim, group, num_kv_heads,
                  double(q_scale));
    std::string s = buf;
    for (int l : lens) {
      s += '_';
      s += std::to_string(l);
    }
    if (lens.size() > 6) s = s.substr(0, s.find("_len") + 4) + "_b" + std::to_string(lens.size()) + "_" +
                             std::to_string(lens[0]) + "_etc";
    if (!deterministic) s += "_dyn";
    if (head_major) s += "_headmajor";
    if (per_head_lists) s += "_perhead";
    if (head_masks) s += "_masks";
    if (split_rows) s += "_split" + std::to_string(split_rows);
    if (q_rows) s += "_qrows" + std::to_string(q_rows);
    return s;
  }
};

struct ParityResult {
  std::string error;  // CUDA or setup failure; empty when the run happened
  double o_rel_err = 0.0;   // max |o_gpu - o_ref| / max |o_ref|
  double lse_abs_err = 0.0;  // max |lse_gpu - lse_ref| over non-empty sequences
  bool all_finite = true;    // every output written and finite (empty sequences: lse -inf)
  bool empty_ok = true;      // empty sequences give exactly (0, -inf)
  // Deterministic mode: the second run is bitwise equal to the first. Dynamic mode: the
  // two runs agree to 1e-5 of max |o| and 1e-5 in lse (page order differs, rounding too).
  bool deterministic = true;
  // Deterministic mode: a run with o_bf16 writes the first run's o rounded to bf16, bit for bit,
  // and leaves o untouched.
  bool bf16_ok = true;
  size_t workspace_bytes = 0;

  bool pass(double o_tol = 2e-3, double lse_tol = 1e-3) const {
    return error.empty() && all_finite && empty_ok && deterministic && bf16_ok && o_rel_err < o_tol &&
           lse_abs_err < lse_tol;
  }
};

// True when a CUDA device can run kernels here.
inline bool cuda_device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// The cases of the issue: head_dim 64/128, groups 1/4/8, lengths 1..33000 at batch 1 and
// mixed at batch 3, plus a zero length, odd group sizes (7, and 16 = two sub-groups of 8),
// and sharp softmax (large queries).
inline std::vector<ParityCase> default_parity_cases(bool quick = false) {
  std::vector<ParityCase> cases;
  const std::vector<std::vector<int>> lens_full = {
      {1}, {15}, {17}, {1000}, {8191}, {33000}, {33000, 17, 8191}, {1, 1000, 15}};
  const std::vector<std::vector<int>> lens_quick = {{1}, {17}, {1000}, {8191, 15, 1}};
  for (int d : {64, 128})
    for (int g : {1, 4, 8})
      for (const auto& l : quick ? lens_quick : lens_full) cases.push_back({d, g, 2, l, 1.0f});
  cases.push_back({128, 8, 2, {0, 5000, 16}, 1.0f});
  cases.push_back({128, 7, 1, {4099, 31}, 1.0f});
  cases.push_back({128, 16, 1, {2049, 300}, 1.0f});
  cases.push_back({128, 8, 2, {12345, 77}, 12.0f});
  cases.push_back({64, 4, 3, {33000, 1}, 12.0f});
  // Shapes of the benchmark and of a server: 8 KV heads at batch 1 (16 CTAs per unit),
  // sequences shorter than max_seq_len in the middle of a batch, sub-groups of different
  // sizes (group 12 = 8 + 4), 16 KV heads with group 1, 16 x 8 = 128 units (one CTA each),
  // and more units than CTA slots (20 x 8).
  cases.push_back({128, 4, 8, {8192}, 1.0f});
  cases.push_back({128, 4, 8, {8192, 100, 0, 3001, 8192}, 4.0f});
  cases.push_back({128, 12, 2, {5000, 7, 2500}, 1.0f});
  cases.push_back({64, 1, 16, {1500, 1501, 3}, 1.0f});
  cases.push_back({128, 4, 8, std::vector<int>(16, 1200), 1.0f});
  cases.push_back({64, 4, 8, {1, 700, 2047, 33, 900, 16, 17, 1000, 0, 650, 1023, 64, 500, 501, 2,
                              1200, 300, 800, 49, 1100},
                   1.0f});
  // Batch 8 x 8 KV heads at 32K: two CTAs per unit with chunks of 1025 pages, where the
  // library switches to its 3-stage kernel (on a 132-SM GPU), in both page modes.
  if (!quick) {
    const std::vector<int> long8 = {32771, 32768, 30000, 32769, 1, 32000, 17, 32770};
    cases.push_back({128, 4, 8, long8, 2.0f});
    cases.push_back({128, 4, 8, long8, 2.0f, false});
  }
  // The split planned for fewer rows than the batch (PagedDecodeArgs::split_rows): long rows
  // beside short ones take many CTAs each, the short rows' CTAs find little or nothing; with
  // per-head lists and masks (a dense row beside quest rows), in both page modes.
  {
    const std::vector<int> mixed = {32771, 100, 0, 3001, 32000, 17, 800, 5000};
    ParityCase c{128, 4, 8, mixed, 2.0f};
    c.split_rows = 2;
    cases.push_back(c);
    c.split_rows = 1, c.deterministic = false;
    cases.push_back(c);
    c.per_head_lists = c.head_masks = true, c.deterministic = true, c.split_rows = 3;
    cases.push_back(c);
    ParityCase d{64, 4, 3, {9000, 16, 1}, 4.0f};
    d.split_rows = 1;
    cases.push_back(d);
  }
  // Two list sets of the same queries in one call (PagedDecodeArgs::q_rows: MAC's keys below
  // a row's prefix end as rows [0, n), those above as rows [n, 2n)), split for the long ones.
  {
    ParityCase c{128, 4, 8, {30000, 2000, 9001, 300, 17, 700}, 2.0f, true, false, true, true};
    c.q_rows = 3, c.split_rows = 3;
    cases.push_back(c);
    ParityCase d{64, 4, 3, {5000, 1, 260, 33}, 4.0f};
    d.q_rows = 2;
    cases.push_back(d);
  }
  // Dynamic page distribution (PagedDecodeArgs::deterministic = false).
  for (const auto& l : std::vector<std::vector<int>>{{33000}, {33000, 17, 8191}, {0, 5000, 16}}) {
    cases.push_back({128, 8, 2, l, 1.0f, false});
    cases.push_back({64, 4, 3, l, 4.0f, false});
  }
  // Head-major pools (explicit page and head strides).
  cases.push_back({128, 4, 8, {8192, 100, 0, 3001}, 2.0f, true, true});
  cases.push_back({64, 8, 2, {33000, 17}, 1.0f, false, true});
  // A page list per (sequence, KV head), as a group-shared sparse selection makes them.
  cases.push_back({128, 4, 8, {8192, 100, 0, 3001}, 2.0f, true, false, true});
  cases.push_back({128, 12, 2, {33000, 17}, 1.0f, false, false, true});
  cases.push_back({64, 4, 3, {5000, 1, 16}, 4.0f, true, false, true});
  // Such lists with a page mask per query head (Quest's union per KV head): heads that attend
  // no page at all (exactly (0, -inf)), sub-groups (12 = 8 + 4), both page modes, both dims.
  cases.push_back({128, 4, 8, {8192, 100, 0, 3001}, 2.0f, true, false, true, true});
  cases.push_back({128, 12, 2, {33000, 17}, 1.0f, false, false, true, true});
  cases.push_back({64, 4, 3, {5000, 1, 16}, 4.0f, true, false, true, true});
  cases.push_back({64, 3, 3, {1, 2, 40}, 1.0f, true, false, true, true});
  return cases;
}

#define SKIM_PARITY_CHECK(call)                                             \
  do {                                                                      \
    cudaError_t _e = (call);                                                \
    if (_e != cudaSuccess) {                                                \
      r.error = std::string(#call) + ": " + cudaGetErrorString(_e);         \
      return r;                                                             \
    }                                                                       \
  } while (0)

inline ParityResult run_parity_case(const ParityCase& pc, uint64_t seed) {
  ParityResult r;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  constexpr int ps = 16;
  const int batch = int(pc.lens.size()), d = pc.head_dim, hkv = pc.num_kv_heads;
  const int heads = hkv * pc.group;
  const uint16_t nan_bf16 = 0x7fc0;

  // Pages: a shuffled pool with 5 spare pages nobody owns, 3 slack slots per table row.
  const ShuffledPages pages = shuffled_pages(pc.lens, ps, 5, 3, rng);
  const int num_pages = pages.num_pages, stride = pages.stride;
  const std::vector<int32_t>& table = pages.table;
  const size_t pool_elems = size_t(num_pages) * hkv * ps * d;
  std::vector<uint16_t> kp(pool_elems, nan_bf16), vp(pool_elems, nan_bf16);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < pages.pages_of(pc.lens[b], ps); ++i) {
      const int32_t page = table[size_t(b) * stride + i];
      const int rows = std::min(ps, pc.lens[b] - i * ps);
      for (int h = 0; h < hkv; ++h)
        for (int t = 0; t < rows; ++t) {
          const size_t off = pc.head_major ? ((size_t(h) * num_pages + page) * ps + t) * d
                                           : ((size_t(page) * hkv + h) * ps + t) * d;
          for (int e = 0; e < d; ++e) {
            kp[off + e] = f32_to_bf16(uni(rng));
            vp[off + e] = f32_to_bf16(uni(rng));
          }
        }
    }
  std::vector<uint16_t> q(size_t(batch) * heads * d);
  for (auto& x : q) x = f32_to_bf16(pc.q_scale * uni(rng));

  // Per-head lists: every page but the sequence's last kept with probability 1/2, in order.
  std::vector<int32_t> head_table;
  std::vector<int> head_lens;
  if (pc.per_head_lists) {
    head_table.assign(size_t(batch) * hkv * stride, std::numeric_limits<int32_t>::max());
    head_lens.assign(size_t(batch) * hkv, 0);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < hkv; ++h) {
        const int n = pages.pages_of(pc.lens[b], ps);
        int32_t* row = head_table.data() + (size_t(b) * hkv + h) * stride;
        int kept = 0;
        for (int i = 0; i < n; ++i)
          if (i == n - 1 || rng() % 2) row[kept++] = table[size_t(b) * stride + i];
        head_lens[size_t(b) * hkv + h] = n == 0 ? 0 : (kept - 1) * ps + (pc.lens[b] - (n - 1) * ps);
      }
  }
  // Per-head masks: each listed page attended by a random subset of the group (often none for
  // a short list, so some heads see no key).
  std::vector<uint32_t> masks;
  if (pc.head_masks) {
    masks.assign(head_table.size(), 0u);
    for (uint32_t& m : masks) m = uint32_t(rng()) & uint32_t((uint64_t(1) << pc.group) - 1);
  }
  const std::vector<int32_t>& table_used = pc.per_head_lists ? head_table : table;
  const std::vector<int>& lens_used = pc.per_head_lists ? head_lens : pc.lens;

  PagedDecodeArgs a;
  a.batch = batch;
  a.num_heads = heads;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.page_size = ps;
  a.max_pages_per_seq = stride;
  a.max_seq_len = *std::max_element(pc.lens.begin(), pc.lens.end());
  // An upper bound, not the exact maximum, is allowed: sometimes add slack.
  a.max_seq_len = std::min(a.max_seq_len + int(rng() % 40), stride * ps);
  a.scale = 1.0f / std::sqrt(float(d));
  a.deterministic = pc.deterministic;
  a.split_rows = pc.split_rows;
  a.q_rows = pc.q_rows;
  a.tables_per_kv_head = pc.per_head_lists;
  if (pc.head_major) {
    a.page_stride = size_t(ps) * d;
    a.head_stride = size_t(num_pages) * ps * d;
  }

  // CPU reference.
  std::vector<float> o_ref(size_t(batch) * heads * d), lse_ref(size_t(batch) * heads);
  {
    PagedDecodeArgs h = a;
    h.q = q.data();
    h.k_pool = kp.data();
    h.v_pool = vp.data();
    h.page_table = table_used.data();
    h.seq_lens = lens_used.data();
    h.head_masks = pc.head_masks ? masks.data() : nullptr;
    h.o = o_ref.data();
    h.lse = lse_ref.data();
    cpu::paged_decode_attention(h);
  }

  // GPU.
  uint16_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  int32_t *dt = nullptr, *dl = nullptr;
  uint32_t* dm = nullptr;
  float *dout = nullptr, *dlse = nullptr;
  void* dws = nullptr;
  struct Free {
    std::vector<void*> p;
    ~Free() {
      for (void* x : p) cudaFree(x);
    }
  } frees;
  auto alloc = [&](auto** ptr, size_t bytes) {
    cudaError_t e = cudaMalloc(reinterpret_cast<void**>(ptr), std::max<size_t>(bytes, 1));
    if (e == cudaSuccess) frees.p.push_back(*ptr);
    return e;
  };
  SKIM_PARITY_CHECK(alloc(&dq, q.size() * 2));
  SKIM_PARITY_CHECK(alloc(&dk, kp.size() * 2));
  SKIM_PARITY_CHECK(alloc(&dv, vp.size() * 2));
  SKIM_PARITY_CHECK(alloc(&dt, table_used.size() * 4));
  SKIM_PARITY_CHECK(alloc(&dl, lens_used.size() * 4));
  SKIM_PARITY_CHECK(alloc(&dout, o_ref.size() * 4));
  SKIM_PARITY_CHECK(alloc(&dlse, lse_ref.size() * 4));
  SKIM_PARITY_CHECK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  SKIM_PARITY_CHECK(cudaMemcpy(dk, kp.data(), kp.size() * 2, cudaMemcpyHostToDevice));
  SKIM_PARITY_CHECK(cudaMemcpy(dv, vp.data(), vp.size() * 2, cudaMemcpyHostToDevice));
  SKIM_PARITY_CHECK(cudaMemcpy(dt, table_used.data(), table_used.size() * 4, cudaMemcpyHostToDevice));
  SKIM_PARITY_CHECK(cudaMemcpy(dl, lens_used.data(), lens_used.size() * 4, cudaMemcpyHostToDevice));
  if (pc.head_masks) {
    SKIM_PARITY_CHECK(alloc(&dm, masks.size() * 4));
    SKIM_PARITY_CHECK(cudaMemcpy(dm, masks.data(), masks.size() * 4, cudaMemcpyHostToDevice));
    a.head_masks = dm;
  }
  a.q = dq;
  a.k_pool = dk;
  a.v_pool = dv;
  a.page_table = dt;
  a.seq_lens = dl;
  a.o = dout;
  a.lse = dlse;
  r.workspace_bytes = cuda::paged_decode_workspace_size(a);
  SKIM_PARITY_CHECK(alloc(&dws, r.workspace_bytes));
  // Zeroed once, as the contract asks; the second run checks that the first left it usable.
  if (r.workspace_bytes) SKIM_PARITY_CHECK(cudaMemset(dws, 0, r.workspace_bytes));
  a.workspace = dws;
  a.workspace_bytes = r.workspace_bytes;

  std::vector<float> o_gpu[2], lse_gpu[2];
  for (int run = 0; run < 2; ++run) {
    // NaN everywhere the kernel is supposed to write.
    SKIM_PARITY_CHECK(cudaMemset(dout, 0xff, o_ref.size() * 4));
    SKIM_PARITY_CHECK(cudaMemset(dlse, 0xff, lse_ref.size() * 4));
    SKIM_PARITY_CHECK(cuda::paged_decode_attention(a, nullptr));
    SKIM_PARITY_CHECK(cudaGetLastError());
    SKIM_PARITY_CHECK(cudaDeviceSynchronize());
    o_gpu[run].resize(o_ref.size());
    lse_gpu[run].resize(lse_ref.size());
    SKIM_PARITY_CHECK(
        cudaMemcpy(o_gpu[run].data(), dout, o_ref.size() * 4, cudaMemcpyDeviceToHost));
    SKIM_PARITY_CHECK(
        cudaMemcpy(lse_gpu[run].data(), dlse, lse_ref.size() * 4, cudaMemcpyDeviceToHost));
  }
  if (pc.deterministic) {  // the output as bf16 (the o projection's input) instead of o
    uint16_t* dout16 = nullptr;
    SKIM_PARITY_CHECK(alloc(&dout16, o_ref.size() * 2));
    SKIM_PARITY_CHECK(cudaMemset(dout, 0xff, o_ref.size() * 4));
    PagedDecodeArgs b16 = a;
    b16.o_bf16 = dout16;
    SKIM_PARITY_CHECK(cuda::paged_decode_attention(b16, nullptr));
    SKIM_PARITY_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> o16(o_ref.size());
    std::vector<float> o_after(o_ref.size());
    SKIM_PARITY_CHECK(cudaMemcpy(o16.data(), dout16, o16.size() * 2, cudaMemcpyDeviceToHost));
    SKIM_PARITY_CHECK(cudaMemcpy(o_after.data(), dout, o_after.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < o16.size(); ++i)
      if (o16[i] != f32_to_bf16(o_gpu[0][i]) || !std::isnan(o_after[i])) r.bf16_ok = false;
  }
  if (pc.deterministic) {
    r.deterministic = o_gpu[0] == o_gpu[1] &&
                      std::equal(lse_gpu[0].begin(), lse_gpu[0].end(), lse_gpu[1].begin(),
                                 [](float x, float y) { return std::memcmp(&x, &y, 4) == 0; });
  } else {
    double mo = 0.0, md = 0.0, ml = 0.0;
    for (size_t i = 0; i < o_ref.size(); ++i) {
      mo = std::max(mo, double(std::fabs(o_ref[i])));
      md = std::max(md, double(std::fabs(o_gpu[0][i] - o_gpu[1][i])));
    }
    for (size_t i = 0; i < lse_ref.size(); ++i)
      if (std::isfinite(lse_gpu[0][i]) || std::isfinite(lse_gpu[1][i]))
        ml = std::max(ml, double(std::fabs(lse_gpu[0][i] - lse_gpu[1][i])));
    r.deterministic = md <= 1e-5 * mo && ml <= 1e-5;  // NaN fails both
  }

  double max_ref = 0.0, max_diff = 0.0;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h) {
      const size_t bh = size_t(b) * heads + h;
      const float lg = lse_gpu[0][bh];
      if (std::isinf(lse_ref[bh]) && lse_ref[bh] < 0) {  // no key: an empty sequence, or a masked head
        if (!(std::isinf(lg) && lg < 0)) r.empty_ok = false;
        for (int e = 0; e < d; ++e)
          if (o_gpu[0][bh * d + e] != 0.0f) r.empty_ok = false;
        continue;
      }
      if (!std::isfinite(lg)) r.all_finite = false;
      else r.lse_abs_err = std::max(r.lse_abs_err, double(std::fabs(lg - lse_ref[bh])));
      for (int e = 0; e < d; ++e) {
        const float og = o_gpu[0][bh * d + e], orf = o_ref[bh * d + e];
        if (!std::isfinite(og)) {
          r.all_finite = false;
          continue;
        }
        max_ref = std::max(max_ref, double(std::fabs(orf)));
        max_diff = std::max(max_diff, double(std::fabs(og - orf)));
      }
    }
  r.o_rel_err = max_ref > 0.0 ? max_diff / max_ref : max_diff;
  return r;
}

#undef SKIM_PARITY_CHECK

}  // namespace skim::test
