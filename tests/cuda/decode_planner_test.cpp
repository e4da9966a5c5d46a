// The GPU's selection stage (backend/cuda/decode_planner.h) against the registry: every
// selector the registry says runs on cuda has a planner, and the planners' byte counts are
// what their plans read (every key when dense; digests and kept pages for gbsa, dense in its
// dense layers).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention/policy_registry.h"
#include "attention/policy_spec.h"
#include "attention/group_page_select_args.h"
#include "backend/cuda/decode_planner.h"
#include "core/error.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

cuda::PlannerShape shape() { return {4, 8, 2, 64, 16, 4, 64}; }

TEST(DecodePlanner, EveryGpuSelectorOfTheRegistryHasOne) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  for (const PolicyInfo& info : policy_registry()) {
    if (info.stage != PolicyStage::Selector || !info.runs_on("cuda")) continue;
    EXPECT_NO_THROW(cuda::DecodePlanner(info.name, shape())) << info.name;
  }
}

TEST(DecodePlanner, BytesAreThoseOfThePlan) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const cuda::PlannerShape s = shape();
  const double per_token = 2.0 * s.num_kv_heads * s.head_dim * 2;
  cuda::DecodePlanner planner("dense", s);
  EXPECT_EQ(planner.bytes_read(0, 0, 1000), 1000 * per_token);
  bool moved = false;
  const int gbsa = planner.acquire("gbsa:keep=0.25,n_min=4,dense_layers=1", moved);
  EXPECT_TRUE(moved);  // the first selecting policy allocates the plan buffers
  EXPECT_EQ(planner.bytes_read(gbsa, 0, 1000), 1000 * per_token);  // a dense layer
  const int pages = (1000 + 15) / 16, kept = group_pages_kept(pages, 0.25, 4);
  EXPECT_EQ(planner.bytes_read(gbsa, 1, 1000),
            std::min(1000, kept * 16) * per_token + pages * s.num_kv_heads * s.head_dim * 2 * 2.0);
  const int streaming = planner.acquire("streaming:sink=4,window=100", moved);
  // 1000 tokens: the sink page and pages 56-62 (tokens 896-999, the window's 900-999).
  EXPECT_EQ(planner.bytes_read(streaming, 2, 1000), (16 + 104) * per_token);
  // quest: the union's K/V are counted on the device (none yet), the host counts the digests.
  const int quest = planner.acquire("quest:budget=0.1,min=0,dense_layers=1", moved);
  EXPECT_EQ(planner.host_bytes(quest, 0, 1000), 1000 * per_token);  // a dense layer
  EXPECT_EQ(planner.host_bytes(quest, 1, 1000), pages * s.num_kv_heads * s.head_dim * 2 * 2.0);
  EXPECT_EQ(planner.device_bytes(nullptr), 0.0);
  EXPECT_GE(planner.acquire("cs", moved), 0);  // cs beside page plans: its rows attend their token plan
}

// cs: its rows attend the forward's token plan (no page plan); it decodes beside page-plan
// policies, not beside mac, retro or art (either way round) nor beside a second cs policy, and
// not composed with mac or art; its bytes are the keys it keeps and the list entries a search
// reads.
TEST(DecodePlanner, CsBesidePagePlansAndCountsItsKeysAndLists) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const cuda::PlannerShape s = shape();
  const double per_token = 2.0 * s.num_kv_heads * s.head_dim * 2;
  cuda::DecodePlanner planner("cs:keep=0.2,window=64,list=0.1,subspaces=4,dense_layers=1", s);
  ASSERT_NE(planner.cs_params(0), nullptr);
  EXPECT_EQ(planner.bytes_read(0, 0, 1000), 1000 * per_token);  // a dense layer
  EXPECT_EQ(planner.bytes_read(0, 1, 1000), 200 * per_token + s.num_kv_heads * 4 * 100 * 6.0);
  bool moved = false;
  EXPECT_GT(planner.acquire("dense", moved), 0);
  EXPECT_GT(planner.acquire("quest:budget=0.1,min=0", moved), 0);
  EXPECT_EQ(planner.acquire("cs:keep=0.2,window=64,list=0.1,subspaces=4,dense_layers=1", moved), 0);  // itself
  EXPECT_THROW(planner.acquire("cs:keep=0.1", moved), Error);  // one cs policy at a time
  EXPECT_THROW(planner.acquire("mac", moved), Error);
  EXPECT_THROW(planner.acquire("quest:budget=0.1+retro:w=2", moved), Error);
  EXPECT_THROW(planner.acquire("gbsa+art", moved), Error);
  EXPECT_THROW(cuda::DecodePlanner("cs+art", s), Error);
  EXPECT_THROW(cuda::DecodePlanner("cs+mac", s), Error);
  cuda::DecodePlanner with_mac("mac", s);
  EXPECT_THROW(with_mac.acquire("cs", moved), Error);  // the other way round
}

// The dense fallback: a policy's rows attend every key in a step where its selection would leave
// fewer tokens unread, over the step's rows, than the kernels cost (gbsa 12288, quest 24576);
// never for dense, streaming or a selection ART orders; Retro's past rows (an index no planner
// holds) are left out.
TEST(DecodePlanner, DenseFallbackWhereSelectionCannotPay) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  cuda::DecodePlanner planner("dense", shape());
  bool moved = false;
  const int gbsa = planner.acquire("gbsa:keep=0.1,n_min=1", moved);
  const int quest = planner.acquire("quest:budget=0.1,min=0", moved);
  const int art = planner.acquire("gbsa:keep=0.1,n_min=1+art", moved);
  const int window = planner.acquire("streaming:sink=4,window=100", moved);
  using V = std::vector<int32_t>;
  const auto fallback = [&](const V& policy, const V& lengths) { return planner.dense_fallback(policy, lengths); };
  // 8192 tokens at keep 0.1 leave 7360 unread (460 of 512 pages): below both thresholds.
  EXPECT_EQ(fallback({gbsa}, {8192}), 1u << gbsa);
  EXPECT_EQ(fallback({quest}, {8192}), 1u << quest);
  EXPECT_EQ(fallback({gbsa}, {32768}), 0u);  // 29.5K unread
  EXPECT_EQ(fallback({gbsa, gbsa}, {8192, 8192}), 0u);  // the rows' sum counts: 14.7K
  EXPECT_EQ(fallback({quest, quest}, {8192, 8192}), 1u << quest);  // quest needs 24576
  EXPECT_EQ(fallback({gbsa, quest, gbsa}, {8192, 32768, 8192}), 0u);  // each policy its own rows
  EXPECT_EQ(fallback({gbsa, quest}, {8192, 8192}), 1u << gbsa | 1u << quest);
  EXPECT_EQ(fallback({0, art, window}, {100, 100, 100}), 0u);  // dense, ART's order, streaming: never
  EXPECT_EQ(fallback({gbsa, 7}, {100, 100}), 1u << gbsa);  // index 7 is no planner's
  EXPECT_EQ(fallback({}, {100}), 0u);  // every row index 0 (dense)
  EXPECT_EQ(planner.dense_bytes(1000), 1000 * 2.0 * shape().num_kv_heads * shape().head_dim * 2);
  // cs: its search costs more (96K tokens unread a step at a search every step, 48K every 4).
  // A planner each: a GPU batch holds one cs policy, and none beside ART.
  for (const bool every_step : {true, false}) {
    cuda::DecodePlanner cs_planner("dense", shape());
    const int cs = cs_planner.acquire(every_step ? "cs:keep=0.05,list=0.05" : "cs:keep=0.05,list=0.05,step=4", moved);
    const auto cs_fallback = [&](const V& policy, const V& lengths) { return cs_planner.dense_fallback(policy, lengths); };
    EXPECT_EQ(cs_fallback({cs}, {32768}), 1u << cs);  // 31.1K unread
    if (every_step) {
      EXPECT_EQ(cs_fallback({cs}, {131072}), 0u);                                // 124.5K
      EXPECT_EQ(cs_fallback({cs, cs, cs, cs}, {32768, 32768, 32768, 32768}), 0u);  // 124.5K together
    } else {
      EXPECT_EQ(cs_fallback({cs}, {65536}), 0u);  // 62.3K
    }
  }
}

// ART's GPU rule (host code: runs without a device, in CI too): the defaults over dense, gbsa,
// quest and streaming are the kernel's rule; the per-head rule, the full-vector test, a dense
// base outside the group's order and rounds past 32 blocks are refused.
TEST(DecodePlanner, ArtRunsTheKernelsRuleOnly) {
  auto rule = [](const std::string& policy) {
    const PolicySpec spec = parse_policy_spec(policy);
    const PolicyPart* base = nullptr;
    for (const PolicyPart& p : spec.parts)
      if (p.name != "art") base = &p;
    return cuda::gpu_art_rule(policy, *spec.find("art"), base);
  };
  for (const char* policy : {"art", "gbsa+art", "quest:budget=0.5+art", "streaming+art", "resa+art:round=32,lag=2"}) {
    ArtRowRule r;
    EXPECT_NO_THROW(r = rule(policy)) << policy;
    EXPECT_EQ(r.active, 1) << policy;
  }
  EXPECT_EQ(rule("resa+art:round=32,lag=2").round_pages, 128);
  EXPECT_EQ(rule("resa+art:round=32,lag=2").lag_rounds, 2);
  for (const char* policy : {"art:stop=head", "gbsa+art:test=full", "art:order=bound", "art:order=recent",
                             "art:order=group,round=64", "gbsa+art:block=128"})
    EXPECT_THROW(rule(policy), Error) << policy;
}

// Policies by index: one index per distinct string while it has users, at most kMaxPolicies
// at once; a released index is taken by a new policy only when none is left (and then the
// caller's graphs are stale: `moved`).
TEST(DecodePlanner, PoliciesByIndexWithinTheLimit) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  cuda::DecodePlanner planner("dense", shape());
  bool moved = false;
  EXPECT_EQ(planner.acquire("dense", moved), 0);
  EXPECT_FALSE(moved);
  std::vector<int> held;
  for (int i = 1; i < cuda::DecodePlanner::kMaxPolicies; ++i) {
    held.push_back(planner.acquire("quest:budget=" + std::to_string(100 * i), moved));
    EXPECT_EQ(held.back(), i);
  }
  EXPECT_EQ(planner.acquire("quest:budget=100", moved), 1);  // the same string, the same index
  EXPECT_THROW(planner.acquire("gbsa", moved), Error);        // a ninth policy
  planner.release(held[2]);
  moved = false;
  EXPECT_EQ(planner.acquire("gbsa", moved), held[2]);
  EXPECT_TRUE(moved);
  EXPECT_THROW(planner.release(7 + 1), Error);
}

}  // namespace
}  // namespace skim
