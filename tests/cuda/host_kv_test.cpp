// KV beyond GPU memory (EngineOptions::host_kv_slots; backend/cuda/host_kv_slots.h): the KV
// cache in pinned host memory, each decode step's selected pages read through a device cache.
// The same kernels over the same values, so the same logits bit for bit as the KV cache on the
// GPU: teacher-forced decode of the 4K demo prompt under dense (the host pools read directly),
// quest, gbsa and resa (the cache; resa's rectification rewrites pages: prefill passes empty
// it), and a fork (its page copies empty it too); a prompt run layer by layer, its logits; cs,
// its token plans mapped as page plans; RetroAttention (its past rows rewrite their pages, which
// every layer's map copies again), MAC (its lists cut at each row's prefix end, mapped after the
// cut) and ART (its lists copied whole, then traversed). A step selecting more pages of one KV
// head than the slots is refused after it, naming the option. Copies ahead of each layer (a
// guessed selection) change nothing either. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "demo_long_case.h"
#include "paged_decode_parity.h"
#include "skim/engine.h"

namespace skim {
namespace {

const std::filesystem::path kRoot = SKIM_SOURCE_DIR;

EngineOptions options(const std::string& policy, int context, int host_kv_slots) {
  EngineOptions o;
  o.model_dir = kRoot / "models/demo-code-28m";
  o.device = "cuda";
  o.max_context = context;
  o.prefill_chunk = 512;
  o.policy = policy;
  o.dense_fallback = false;  // the policies select at every step (the fallback is off over host KV anyway)
  o.host_kv_slots = host_kv_slots;
  o.max_sequences = 2;  // a fork's pages beside its parent's
  return o;
}

// Teacher-forced steps of the demo-long prompt; every step's logits, and those of a fork of the
// sequence taken after `fork_at` steps (empty: none).
std::vector<std::vector<float>> decode(Engine& e, const test::DemoLong& d, int steps, int fork_at) {
  int seq = e.open_sequence();
  e.append(seq, d.prefix, {});
  std::vector<std::vector<float>> out;
  for (int i = 0; i < steps; ++i) {
    if (i == fork_at) {
      const int forked = e.fork_sequence(seq);
      e.close_sequence(seq);
      seq = forked;
    }
    const int t = d.token(i);
    out.push_back(e.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1)));
  }
  return out;
}

TEST(GpuHostKv, DecodesAsTheKvCacheOnTheGpu) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const test::DemoLong d;
  const int context = int(d.prompt.size()) + 64, steps = 12;
  for (const std::string policy : {"dense", "quest:budget=0.1,min=0,dense_layers=1", "gbsa:keep=0.1,n_min=16",
                                   "resa:keep=0.1,n_min=16,f=4"}) {
    Engine on_gpu(options(policy, context, 0)), on_host(options(policy, context, 256));
    const auto want = decode(on_gpu, d, steps, 5), got = decode(on_host, d, steps, 5);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << policy << ", step " << i;
    EXPECT_DOUBLE_EQ(on_host.decode_kv_bytes_read(), on_gpu.decode_kv_bytes_read()) << policy;
  }
}

// `--host-kv-slots auto` (-1): the cache sized from the GPU's free memory, at most every page of
// the engine's sequences (the demo prompt's few hundred); quest's logits as with the KV cache on
// the GPU, bit for bit. Written 2026-11-27, not yet run on a device.
TEST(GpuHostKv, AutoSlotsDecodeAsTheKvCacheOnTheGpu) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const test::DemoLong d;
  const int context = int(d.prompt.size()) + 64, steps = 6;
  const std::string policy = "quest:budget=0.1,min=0,dense_layers=1";
  Engine on_gpu(options(policy, context, 0)), on_host(options(policy, context, -1));
  const auto want = decode(on_gpu, d, steps, -1), got = decode(on_host, d, steps, -1);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "step " << i;
}

// A prompt over host KV runs layer by layer (GpuForward::run_by_layer: each layer's K/V in a
// device pool while every chunk runs it, then written to the host once): the logits of rows in
// its first, a middle and its last chunk equal those of the prompt run chunk by chunk with the KV
// cache on the GPU, bit for bit; and a second prompt appended to the sequence (its prefix's
// pages copied in per layer) too.
TEST(GpuHostKv, PromptRunsLayerByLayerAsChunkByChunk) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const test::DemoLong d;
  const int context = int(d.prompt.size()) + 64;
  Engine on_gpu(options("dense", context, 0)), on_host(options("dense", context, 256));
  const int half = int(d.prefix.size()) / 2 + 7;  // not a chunk boundary: the second prompt starts mid-page
  const std::span<const int> first(d.prefix.data(), size_t(half)), second(d.prefix.data() + half, d.prefix.size() - half);
  const std::vector<int> rows_first = {0, 600, half - 1}, rows_second = {0, int(second.size()) - 1};
  const int a = on_gpu.open_sequence(), b = on_host.open_sequence();
  EXPECT_EQ(on_host.append(b, first, rows_first), on_gpu.append(a, first, rows_first)) << "the first prompt";
  EXPECT_EQ(on_host.append(b, second, rows_second), on_gpu.append(a, second, rows_second)) << "a prompt after it";
}

// cs over host KV: the token-gather kernel reads each step's picked rows from the host pools
// directly (no page is mapped, so 16 slots, far fewer than its picks' pages, refuse nothing);
// its tables built from the host pools. The same logits bit for bit as with the KV cache on the
// GPU.
TEST(GpuHostKv, CsDecodesAsTheKvCacheOnTheGpu) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const test::DemoLong d;
  const int context = int(d.prompt.size()) + 64, steps = 12;
  const std::string policy = "cs:keep=0.05,list=0.2,points=4096,window=64";
  Engine on_gpu(options(policy, context, 0)), on_host(options(policy, context, 16));
  const auto want = decode(on_gpu, d, steps, 5), got = decode(on_host, d, steps, 5);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << policy << ", step " << i;
}

// The stages that make lists of their own from the base's plan: Retro (w = 4: three past rows a
// step, each rewriting its page: no stale slot may be read after it), MAC over quest (its parts
// below and above the prefix end mapped as one) and over dense (the host pools read directly),
// ART over gbsa and quest. The same logits bit for bit as with the KV cache on the GPU. Written
// 2026-11-27, not yet run on a device.
TEST(GpuHostKv, RetroMacAndArtDecodeAsTheKvCacheOnTheGpu) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const test::DemoLong d;
  const int context = int(d.prompt.size()) + 64, steps = 12;
  for (const std::string policy :
       {"quest:budget=0.1,min=0,dense_layers=1+retro:w=4", "gbsa:keep=0.1,n_min=16+retro:w=2",
        "quest:budget=0.25,min=0+mac:tau=0.6,window=64,band=64,min_context=0",
        "mac:tau=0.6,window=64,band=64,min_context=0", "gbsa:keep=0.1,n_min=16+art:stop=group,test=probe",
        "quest:budget=0.1,min=0+art:stop=group,test=probe,round=4,patience=2"}) {
    Engine on_gpu(options(policy, context, 0)), on_host(options(policy, context, 256));
    const auto want = decode(on_gpu, d, steps, 5), got = decode(on_host, d, steps, 5);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << policy << ", step " << i;
  }
}

// Copies ahead (EngineOptions::host_kv_prefetch: each layer's pages guessed from the layer
// before's input and copied on a second stream while it runs) change no output: the same logits
// bit for bit as the KV cache on the GPU, for quest (its first layer dense: no guess for it),
// gbsa, ART over quest, and a cache small enough (48 slots) that guesses find few free slots;
// and the guesses copy pages the layers' own maps then find resident (fewer copies of their own
// than the same engine without them). Passed on an H100 (2026-11-27). The prefetch is on by
// default, so every other test here runs with it (MAC, Retro and cs steps turn it off).
TEST(GpuHostKv, PrefetchDecodesAsTheKvCacheOnTheGpu) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const test::DemoLong d;
  const int context = int(d.prompt.size()) + 64, steps = 12;
  struct Case {
    std::string policy;
    int slots;
  };
  for (const Case& c : {Case{"quest:budget=0.1,min=0,dense_layers=1", 256}, Case{"gbsa:keep=0.1,n_min=16", 256},
                        Case{"quest:budget=0.1,min=0+art:stop=group,test=probe,round=4,patience=2", 256},
                        Case{"gbsa:keep=0.05,n_min=16", 48}}) {
    EngineOptions ahead = options(c.policy, context, c.slots);
    ahead.host_kv_prefetch = true;
    EngineOptions own_only = options(c.policy, context, c.slots);
    own_only.host_kv_prefetch = false;
    Engine on_gpu(options(c.policy, context, 0)), on_host(ahead), plain(own_only);
    const auto want = decode(on_gpu, d, steps, 5), got = decode(on_host, d, steps, 5);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << c.policy << ", step " << i;
    // What the guesses did: pages copied ahead, and the layers' own maps' copies against the
    // same steps without them (the demo model's queries change little across a layer).
    (void)decode(plain, d, steps, 5);
    std::map<std::string, double> with = on_host.policy_stats().counters, without = plain.policy_stats().counters;
    std::printf("[ prefetch ] %s, %d slots: %.0f pages copied ahead; own copies %.0f against %.0f without, hits %.0f "
                "against %.0f\n",
                c.policy.c_str(), c.slots, with["host_kv.pages_copied_ahead"], with["host_kv.pages_copied"],
                without["host_kv.pages_copied"], with["host_kv.page_hits"], without["host_kv.page_hits"]);
    EXPECT_GT(with["host_kv.pages_copied_ahead"], 0) << c.policy;
    EXPECT_EQ(without["host_kv.pages_copied_ahead"], 0) << c.policy;
    EXPECT_LT(with["host_kv.pages_copied"], without["host_kv.pages_copied"]) << c.policy << ": the guesses hid no miss";
  }
}

TEST(GpuHostKv, RefusesAStepLargerThanItsSlots) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const test::DemoLong d;
  const int context = int(d.prompt.size()) + 64;
  // quest at half the context selects far more than 4 pages of a KV head.
  Engine e(options("quest:budget=0.5,min=0,dense_layers=0", context, 4));
  const int seq = e.open_sequence();
  e.append(seq, d.prefix, {});
  const int t = d.token(0);
  try {
    e.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1));
    FAIL() << "a step over its slots ran";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("slots"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace skim
