// MAC's decode-stage kernels against their CPU references (backend/cpu/mac_decode.h, which
// tests/attention/mac_decode_test.cpp holds to the definitions), on fresh random inputs: the
// page plan exactly (lists, masks, lengths; rows of other policies passed through); the match
// exactly (the kernel's arithmetic is the reference's: fp32 fma over the dimensions in order);
// merge and push within float rounding of expf against std::exp, ring fills exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../mac_plan_case.h"
#include "../mac_ring_case.h"
#include "backend/cpu/mac_decode.h"
#include "backend/cuda/mac_decode.cuh"
#include "backend/cuda/paged_decode_attention.cuh"
#include "core/dtype.h"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = a.size() == b.size() ? 0.0f : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(CudaMacPagePlan, EqualsTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int trial = 0; trial < 18; ++trial) {
    // Trials 9-11: a dense base, the rows' own tables, with the plan told so (base_is_table: no
    // inverse map on the GPU; the CPU reference plans it as any base). Trials 12-17: mac+art,
    // `below` in ART's order over a base list in a shuffled (visiting) order, with below_listed
    // (written 2026-11-27 without a device).
    const bool table_base = trial >= 9 && trial < 12, art = trial >= 12;
    const bool per_head = !table_base && trial % 3 != 0, masked = !table_base && trial % 3 == 2;
    test::MacPlanCase c(test::random_int(1, 4), test::random_int(1, 8), test::random_int(0, 600), per_head, masked,
                        {test::random_int(1, 9000), test::random_int(1, 40), 16, 1, 2500, 4097});
    if (art) c.shuffle_base();
    std::vector<uint32_t> c_listed(c.lists(), 0xdeadbeefu);
    std::vector<int32_t> row_policy(size_t(c.batch()));
    for (int32_t& p : row_policy) p = test::random_int(0, 3) == 0 ? 1 : 0;  // policy 1: another policy's rows
    std::vector<int32_t> table(c.slots(), -7), lens(c.lists(), -7);
    std::vector<uint32_t> masks(c.slots(), 0xdeadbeefu);
    std::vector<int32_t> cb = table, ca = table, cbl = lens, cal = lens;
    std::vector<uint32_t> cbm = masks, cam = masks;
    MacPagePlanArgs a = c.args();
    a.rows = PlanRows{row_policy.data(), 1u};
    a.page_table = c.pages.table.data();
    a.seq_lens = c.lens.data();
    a.base_table = table_base ? c.pages.table.data() : c.base_table.data();
    a.base_lens = table_base ? c.lens.data() : c.base_lens.data();
    a.base_masks = c.masked ? c.base_masks.data() : nullptr;
    a.band_begin = c.band_begin.data();
    a.below_table = cb.data();
    a.below_lens = cbl.data();
    a.below_masks = cbm.data();
    a.above_table = ca.data();
    a.above_lens = cal.data();
    a.above_masks = cam.data();
    a.art_order = art;
    a.below_listed = c_listed.data();
    cpu::mac_page_plan(a);

    auto d_rp = to_device(row_policy), d_pt = to_device(c.pages.table), d_lens = to_device(c.lens);
    auto d_bt = to_device(c.base_table), d_bl = to_device(c.base_lens), d_band = to_device(c.band_begin);
    auto d_bm = to_device(c.masked ? c.base_masks : std::vector<uint32_t>(1, 0u));
    auto gb = to_device(table), ga = to_device(table), gbl = to_device(lens), gal = to_device(lens);
    auto gbm = to_device(masks), gam = to_device(masks);
    cuda::DeviceBuffer<unsigned long long> listed(1);
    cuda::check(cudaMemset(listed.data(), 0, listed.bytes()), "cudaMemset");
    MacPagePlanArgs g = a;
    g.rows = PlanRows{d_rp.data(), 1u};
    g.page_table = d_pt.data();
    g.seq_lens = d_lens.data();
    g.base_table = table_base ? d_pt.data() : d_bt.data();
    g.base_lens = table_base ? d_lens.data() : d_bl.data();
    g.base_is_table = table_base;
    g.base_masks = c.masked ? d_bm.data() : nullptr;
    g.band_begin = d_band.data();
    g.below_table = gb.data();
    g.below_lens = gbl.data();
    g.below_masks = gbm.data();
    g.above_table = ga.data();
    g.above_lens = gal.data();
    g.above_masks = gam.data();
    auto g_listed = to_device(std::vector<uint32_t>(c.lists(), 0xdeadbeefu));
    g.below_listed = g_listed.data();
    g.listed_tokens = listed.data();
    g.num_pool_pages = c.pages.num_pages;
    cuda::DeviceBuffer<uint8_t> ws(cuda::mac_page_plan_workspace_size(g));
    g.workspace = ws.data();
    g.workspace_bytes = ws.bytes();
    ASSERT_EQ(cuda::mac_page_plan(g, nullptr), cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "mac_page_plan");
    // Slots past a list hold whatever: compare the listed part and the lengths.
    const std::vector<int32_t> hb = to_host(gb), ha = to_host(ga), hbl = to_host(gbl), hal = to_host(gal);
    const std::vector<uint32_t> hbm = to_host(gbm), ham = to_host(gam);
    EXPECT_EQ(hbl, cbl) << "trial " << trial;
    EXPECT_EQ(hal, cal) << "trial " << trial;
    EXPECT_EQ(to_host(g_listed), c_listed) << "trial " << trial;
    unsigned long long want = 0;
    for (size_t l = 0; l < c.lists(); ++l) {
      if (row_policy[l / size_t(c.kv_heads)] == 0)  // MAC rows only; mac+art's below is ART's to count
        want += (art ? 0 : uint64_t(cbl[l])) + uint64_t(cal[l]);
      for (int j = 0; j * c.page_size < cbl[l]; ++j) {
        const size_t at = l * c.pages.stride + j;
        ASSERT_EQ(hb[at], cb[at]) << "below, list " << l << " slot " << j;
        ASSERT_EQ(hbm[at], cbm[at]) << "below mask, list " << l << " slot " << j;
      }
      for (int j = 0; j * c.page_size < cal[l]; ++j) {
        const size_t at = l * c.pages.stride + j;
        ASSERT_EQ(ha[at], ca[at]) << "above, list " << l << " slot " << j;
        ASSERT_EQ(ham[at], cam[at]) << "above mask, list " << l << " slot " << j;
      }
    }
    EXPECT_EQ(to_host(listed)[0], want);
  }
}

struct DeviceRings {
  cuda::DeviceBuffer<uint16_t> q;
  cuda::DeviceBuffer<float> o, lse;
  cuda::DeviceBuffer<int32_t> pos, fill;
  explicit DeviceRings(const test::MacRingCase& c)
      : q(to_device(c.ring_q)), o(to_device(c.ring_o)), lse(to_device(c.ring_lse)), pos(to_device(c.pos)),
        fill(to_device(c.fill)) {}
  MacRingsView view(int capacity) {
    return {.capacity = capacity, .q_pre = q.data(), .o = o.data(), .lse = lse.data(), .pos = pos.data(),
            .fill = fill.data()};
  }
};

TEST(CudaMacMatch, EqualsTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int d : {64, 128}) {
    test::MacRingCase c(6, 5, d, test::random_int(1, 300));
    for (int s = 0; s < c.slots; ++s) mac_fill_step(c.fill.data(), s)[0] = mac_fill_step(c.fill.data(), s)[1] = -5;
    std::vector<int32_t> band(size_t(c.batch) * c.heads, 7), hit(band.size(), 7);
    unsigned long long bytes = 0;
    std::vector<uint16_t> rq = c.ring_q;
    std::vector<float> ro = c.ring_o, rl = c.ring_lse;
    std::vector<int32_t> rp = c.pos, rf = c.fill;
    MacMatchArgs a{.batch = c.batch, .num_heads = c.heads, .head_dim = d, .page_size = c.page_size,
                   .q_pre = c.q_pre.data(), .positions = c.positions.data(), .row_slot = c.row_slot.data(),
                   .row_policy = c.row_policy.data(), .rules = c.rules.data(),
                   .rings = {.capacity = c.capacity, .q_pre = rq.data(), .o = ro.data(), .lse = rl.data(),
                             .pos = rp.data(), .fill = rf.data()},
                   .band_begin = band.data(), .hit_entry = hit.data(), .bytes = &bytes};
    cpu::mac_match(a);
    DeviceRings r(c);
    auto dq = to_device(c.q_pre);
    auto ds = to_device(c.row_slot), dp = to_device(c.row_policy), dpos = to_device(c.positions);
    auto drules = to_device(c.rules);
    auto gband = to_device(std::vector<int32_t>(band.size(), 7)), ghit = to_device(std::vector<int32_t>(band.size(), 7));
    cuda::DeviceBuffer<unsigned long long> gbytes(1);
    cuda::check(cudaMemset(gbytes.data(), 0, gbytes.bytes()), "cudaMemset");
    MacMatchArgs g = a;
    g.q_pre = dq.data();
    g.positions = dpos.data();
    g.row_slot = ds.data();
    g.row_policy = dp.data();
    g.rules = drules.data();
    g.rings = r.view(c.capacity);
    g.band_begin = gband.data();
    g.hit_entry = ghit.data();
    g.bytes = gbytes.data();
    ASSERT_EQ(cuda::mac_match(g, nullptr), cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "mac_match");
    EXPECT_EQ(to_host(ghit), hit) << "d " << d;
    EXPECT_EQ(to_host(gband), band) << "d " << d;
    EXPECT_EQ(to_host(gbytes)[0], bytes);
    EXPECT_EQ(to_host(r.fill), rf) << "d " << d;  // the step views of the rows' slots made the latest
  }
}

TEST(CudaMacMergePush, EqualsTheCpuReference) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int d : {64, 128}) {
    const test::MacRingCase c(5, 3, d, test::random_int(1, 12));
    std::vector<int32_t> hit(size_t(c.batch) * c.heads, -1);
    for (int b = 1; b < c.batch; ++b)
      for (int h = 0; h < c.heads; ++h)
        if (c.count(b) > 0 && test::random_int(0, 1)) hit[size_t(b) * c.heads + h] = c.first(b);
    std::vector<uint16_t> rq = c.ring_q;
    std::vector<float> ro = c.ring_o, rl = c.ring_lse, out(c.below_o.size()), out_lse(c.below_lse.size());
    std::vector<int32_t> rp = c.pos, rf = c.fill;
    MacMergePushArgs a{.merge = {.batch = c.batch, .num_heads = c.heads, .head_dim = d, .below_o = c.below_o.data(),
                                 .below_lse = c.below_lse.data(), .above_o = c.above_o.data(),
                                 .above_lse = c.above_lse.data(), .out = out.data()},
                       .out_lse = out_lse.data(), .hit_entry = hit.data(), .row_slot = c.row_slot.data(),
                       .positions = c.positions.data(), .q_pre = c.q_pre.data(), .row_policy = c.row_policy.data(),
                       .rules = c.rules.data(),
                       .rings = {.capacity = c.capacity, .q_pre = rq.data(), .o = ro.data(), .lse = rl.data(),
                                 .pos = rp.data(), .fill = rf.data()}};
    cpu::mac_merge_push(a);
    DeviceRings r(c);
    auto bo = to_device(c.below_o), bl = to_device(c.below_lse), ao = to_device(c.above_o), al = to_device(c.above_lse);
    auto dh = to_device(hit), ds = to_device(c.row_slot), dpos = to_device(c.positions);
    auto dq = to_device(c.q_pre);
    auto dp = to_device(c.row_policy);
    auto drules = to_device(c.rules);
    cuda::DeviceBuffer<float> gout(out.size()), glse(out_lse.size());
    MacMergePushArgs g = a;
    g.merge.below_o = bo.data();
    g.merge.below_lse = bl.data();
    g.merge.above_o = ao.data();
    g.merge.above_lse = al.data();
    g.merge.out = gout.data();
    g.out_lse = glse.data();
    g.hit_entry = dh.data();
    g.row_slot = ds.data();
    g.positions = dpos.data();
    g.q_pre = dq.data();
    g.row_policy = dp.data();
    g.rules = drules.data();
    g.rings = r.view(c.capacity);
    ASSERT_EQ(cuda::mac_merge_push(g, nullptr), cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "mac_merge_push");
    EXPECT_LT(max_abs_diff(to_host(gout), out), 1e-5f) << "d " << d;
    const std::vector<float> hl = to_host(glse);
    for (size_t i = 0; i < hl.size(); ++i)
      if (std::isinf(out_lse[i])) EXPECT_EQ(hl[i], out_lse[i]);
      else EXPECT_NEAR(hl[i], out_lse[i], 1e-5);
    EXPECT_EQ(to_host(r.q), rq);
    EXPECT_LT(max_abs_diff(to_host(r.o), ro), 1e-5f);
    EXPECT_EQ(to_host(r.pos), rp);
    EXPECT_EQ(to_host(r.fill), rf);
  }
}

// A prompt chunk's rows push into one slot's ring in their order (a run of rows of one slot),
// the ring advancing once for the run, as the CPU reference's row-by-row pushes do.
TEST(CudaMacMergePush, RowsOfOneSlotAppendInOrder) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  test::MacRingCase c(5, 3, 64, 6);
  c.row_slot = {1, 1, 1, 1, 2};  // a run of four rows (more than the ring's free entries), then another slot
  c.row_policy.assign(5, 0);
  std::vector<uint16_t> rq = c.ring_q;
  std::vector<float> ro = c.ring_o, rl = c.ring_lse;
  std::vector<int32_t> rp = c.pos, rf = c.fill;
  MacMergePushArgs a{.merge = {.batch = c.batch, .num_heads = c.heads, .head_dim = c.d, .below_o = c.below_o.data(),
                               .below_lse = c.below_lse.data()},
                     .row_slot = c.row_slot.data(), .positions = c.positions.data(), .q_pre = c.q_pre.data(),
                     .row_policy = c.row_policy.data(), .rules = c.rules.data(),
                     .rings = {.capacity = c.capacity, .q_pre = rq.data(), .o = ro.data(), .lse = rl.data(),
                               .pos = rp.data(), .fill = rf.data()}};
  cpu::mac_merge_push(a);
  DeviceRings r(c);
  auto bo = to_device(c.below_o), bl = to_device(c.below_lse);
  auto ds = to_device(c.row_slot), dpos = to_device(c.positions);
  auto dq = to_device(c.q_pre);
  auto dp = to_device(c.row_policy);
  auto drules = to_device(c.rules);
  MacMergePushArgs g = a;
  g.merge.below_o = bo.data();
  g.merge.below_lse = bl.data();
  g.row_slot = ds.data();
  g.positions = dpos.data();
  g.q_pre = dq.data();
  g.row_policy = dp.data();
  g.rules = drules.data();
  g.rings = r.view(c.capacity);
  ASSERT_EQ(cuda::mac_merge_push(g, nullptr), cudaSuccess);
  cuda::check(cudaDeviceSynchronize(), "mac_merge_push");
  EXPECT_EQ(to_host(r.fill), rf);
  EXPECT_EQ(to_host(r.pos), rp);
  EXPECT_EQ(to_host(r.q), rq);
  EXPECT_LT(max_abs_diff(to_host(r.o), ro), 1e-5f);
}

// MAC's merge and push run by the attention call (paged_decode_attention's MAC form: the chunk
// merge's epilogue where the call splits its lists, mac_merge_push after it where it does not)
// against the call followed by mac_merge_push, on the one-call layout (rows [0, n) the parts
// below the prefix ends, [n, 2n) above, the same queries): the outputs (fp32 or bf16) and the
// rings' states within float rounding, the rings' queries, positions and fills' latest views
// exactly. Rows without a ring, of another policy, and a run of rows of one
// slot (whose ring advances once, by the run) among the cases.
TEST(CudaMacMergeInCall, EqualsTheCallThenMergePush) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (int trial = 0; trial < 8; ++trial) {
    const int d = trial % 2 ? 64 : 128, kvh = test::random_int(1, 2), group = test::random_int(1, 4);
    const int heads = kvh * group, ps = 16;
    const bool split = trial < 6, bf16_out = trial % 3 == 0;  // short lists: one CTA each, no chunk merge
    // Trial 4: a run of four rows of one slot, in a ring of at least four (a prompt chunk pushes
    // at most its window's last rows: each row its own entry).
    test::MacRingCase c(5, heads, d, test::random_int(trial == 4 ? 4 : 1, 12));
    if (trial == 4) {
      c.row_slot = {1, 1, 1, 1, 2};
      c.row_policy.assign(5, 0);
    }
    const int n = c.batch, max_tokens = split ? 2000 : 20, P = (max_tokens + ps - 1) / ps, pool = 64;
    std::vector<int32_t> hit(size_t(n) * heads, -1);
    for (int b = 0; b < n; ++b)
      for (int h = 0; h < heads; ++h) {
        const int s = c.row_slot[size_t(b)];
        // A run of rows of one slot reuses nothing (a prompt chunk's rows): a row's push may
        // overwrite the entry another row of the run would read.
        if (trial != 4 && s >= 0 && c.count(s) > 0 && test::random_int(0, 1))
          hit[size_t(b) * heads + h] = c.first(s);
      }
    std::vector<int32_t> table(size_t(2 * n) * kvh * P), lens(size_t(2 * n) * kvh);
    for (auto& id : table) id = test::random_int(0, pool - 1);
    for (auto& len : lens) len = test::random_int(0, max_tokens);
    std::vector<uint16_t> q(size_t(n) * heads * d), kv(size_t(pool) * kvh * ps * d * 2);
    const std::vector<float> qf = test::random_vector(q.size()), kvf = test::random_vector(kv.size());
    std::transform(qf.begin(), qf.end(), q.begin(), f32_to_bf16);
    std::transform(kvf.begin(), kvf.end(), kv.begin(), f32_to_bf16);
    auto dq = to_device(q), dkv = to_device(kv), dqp = to_device(c.q_pre);
    auto dtable = to_device(table), dlens = to_device(lens), dh = to_device(hit), ds = to_device(c.row_slot),
         dpos = to_device(c.positions);
    auto dp = to_device(c.row_policy);
    auto drules = to_device(c.rules);
    const int short_pages = trial % 2 ? 0 : test::random_int(1, 2 * P);  // PagedDecodeArgs::short_pages
    struct Run {
      std::vector<float> out, out_lse, ring_o, ring_lse;
      std::vector<uint16_t> out16, ring_q;
      std::vector<int32_t> pos, fill;
    };
    auto run = [&](bool in_call) {
      DeviceRings r(c);
      cuda::DeviceBuffer<float> states(size_t(2 * n) * heads * d), states_lse(size_t(2 * n) * heads);
      cuda::DeviceBuffer<float> out(size_t(n) * heads * d), out_lse(size_t(n) * heads);
      cuda::DeviceBuffer<uint16_t> out16(size_t(n) * heads * d);
      PagedDecodeArgs a{.batch = 2 * n, .num_heads = heads, .num_kv_heads = kvh, .head_dim = d,
                        .max_pages_per_seq = P, .max_seq_len = max_tokens, .scale = 1.0f / std::sqrt(float(d)),
                        .tables_per_kv_head = true, .split_rows = n, .q_rows = n, .q = dq.data(),
                        .k_pool = dkv.data(), .v_pool = dkv.data() + kv.size() / 2, .page_table = dtable.data(),
                        .seq_lens = dlens.data(), .o = states.data(), .lse = states_lse.data()};
      cuda::DeviceBuffer<uint8_t> ws(std::max<size_t>(1, cuda::paged_decode_workspace_size(a)));
      cuda::check(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset");
      a.workspace = ws.data();
      a.workspace_bytes = ws.bytes();
      const size_t part = size_t(n) * heads;
      const MacMergePushArgs g{
          .merge = {.batch = n, .num_heads = heads, .head_dim = d, .below_o = states.data(),
                    .below_lse = states_lse.data(), .above_o = states.data() + part * d,
                    .above_lse = states_lse.data() + part, .out = bf16_out ? nullptr : out.data()},
          .out_lse = out_lse.data(), .out_bf16 = bf16_out ? out16.data() : nullptr, .hit_entry = dh.data(),
          .row_slot = ds.data(), .positions = dpos.data(), .q_pre = dqp.data(), .row_policy = dp.data(),
          .rules = drules.data(), .rings = r.view(c.capacity)};
      if (in_call) {
        // The rows above the prefix ends as short lists (their units' first CTAs only): any
        // bound, even one their lists exceed (the CTAs then take more rounds), gives the same.
        a.short_pages = short_pages;
        EXPECT_EQ(cuda::paged_decode_attention(a, g, nullptr), cudaSuccess);
      } else {
        EXPECT_EQ(cuda::paged_decode_attention(a, nullptr), cudaSuccess);
        EXPECT_EQ(cuda::mac_merge_push(g, nullptr), cudaSuccess);
      }
      cuda::check(cudaDeviceSynchronize(), "MAC step");
      return Run{to_host(out), to_host(out_lse), to_host(r.o), to_host(r.lse), to_host(out16), to_host(r.q),
                 to_host(r.pos), to_host(r.fill)};
    };
    const Run want = run(false), got = run(true);
    const std::string at = "trial " + std::to_string(trial) + ", d " + std::to_string(d) + ", heads " +
                           std::to_string(heads) + ", kv heads " + std::to_string(kvh) + ", short pages " +
                           std::to_string(short_pages);
    if (bf16_out) {
      std::vector<float> w(want.out16.size()), o(got.out16.size());
      std::transform(want.out16.begin(), want.out16.end(), w.begin(), bf16_to_f32);
      std::transform(got.out16.begin(), got.out16.end(), o.begin(), bf16_to_f32);
      EXPECT_LT(max_abs_diff(o, w), 1e-2f) << at;  // a bf16 step at most, where rounding differs
    } else {
      EXPECT_LT(max_abs_diff(got.out, want.out), 2e-5f) << at;
    }
    for (size_t i = 0; i < want.out_lse.size(); ++i)
      if (std::isinf(want.out_lse[i])) EXPECT_EQ(got.out_lse[i], want.out_lse[i]) << at;
      else EXPECT_NEAR(got.out_lse[i], want.out_lse[i], 2e-5) << at;
    EXPECT_LT(max_abs_diff(got.ring_o, want.ring_o), 2e-5f) << at;
    EXPECT_LT(max_abs_diff(got.ring_lse, want.ring_lse), 2e-5f) << at;
    EXPECT_EQ(got.ring_q, want.ring_q) << at;
    EXPECT_EQ(got.pos, want.pos) << at;
    // Where the call splits, its epilogue leaves the fills' step views as they were (the next
    // step's match copies latest); where it does not, mac_merge_push writes both, as `want`.
    const std::vector<int32_t>& step_views = split ? c.fill : want.fill;
    for (int s = 0; s < c.slots; ++s)
      for (int k = 0; k < 2; ++k) {
        const size_t step = size_t(kMacFillInts) * s + k, latest = step + 2;
        EXPECT_EQ(got.fill[latest], want.fill[latest]) << at << ", slot " << s;
        EXPECT_EQ(got.fill[step], step_views[step]) << at << ", slot " << s;
      }
  }
}

}  // namespace
}  // namespace skim
