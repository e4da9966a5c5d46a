// skim bench: GPU decode speed against the memory-bandwidth floor. Decode attention alone on
// Llama-3.1-8B shapes, and whole greedy decode steps of the demo model (or --model) and of a
// random-weight model of Llama-3.1-8B's shape, generated on the device.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#ifdef SKIM_HAVE_CUDA
#include "backend/cuda/decode_bench.h"
#include "backend/cuda/tensor_parallel_bench.h"
#include "kv/host_kv_budget.h"
#include "model/model.h"
#endif

namespace skim::cli {

namespace {

struct BenchArgs {
  std::filesystem::path model_dir;
  std::string contexts = "8192,32768";
  std::string attention_contexts = "8192,32768,131072";
  std::string batches = "1";
  std::string attention_batches = "1,8";
  int steps = 64;
  std::string prefill_contexts = "8192,32768";
  std::string prefill_attention;  // contexts of the prefill attention kernel's table (empty: none)
  int prefill_8b_max = 8192;      // the 8B shape prefills only contexts up to this (8K: 1 s; 128K: minutes)
  int chunk = kGpuPrefillChunk;  // what the engine prefills with on the GPU
  double sparse_keep = 0.1;
  bool attention_only = false, e2e_only = false, no_8b = false, no_prefill = false;
  bool policy_defaults = false;  // also the end-to-end steps of every GPU policy at its defaults
  bool mac = false;              // MAC's end-to-end steps at forced hit rates
  bool retro = false;            // RetroAttention's steps at w = 2, 4, 8 against quest's
  bool art = false;              // the ART decode attention kernel at forced stops
  int art_round = 64;            // its round, pages
  int art_max_warps = 0;         // its warps per list (0: paged decode attention's split)
  bool no_dense_fallback = false;  // end to end: every step runs its policy (the engine's default falls back)
  std::vector<std::string> e2e_policy;  // end to end: these rows instead of the default ones
  bool only_8b = false;                 // end to end: the 8B shape alone (no demo model)
  int host_kv_slots = 0;                // end to end: the K/V pools in host memory, this device cache
  bool host_kv_prefetch = true;         // ... and each layer's pages copied ahead by a guess
  std::string retro_windows = "2,4,8";  // --retro's w
  std::string tp;            // tensor-parallel sizes: only the --tp table
  std::string shape = "70b";  // its random-weight model shape: 8b or 70b
  std::string json_path;
};

#ifdef SKIM_HAVE_CUDA
// gbsa's n_min in the end-to-end steps (blocks of 16 tokens).
constexpr int kBenchMinBlocks = 16;

// The end-to-end rows at one context and batch: (policy, rectification f to time). At
// --sparse-keep k: gbsa (its resa twin: the rectification timed), quest in every layer and
// streaming reading k of the context, and the three of them with dense mixed in one batch (3 or
// more sequences); with --policy-defaults the GPU policies at their defaults too.
std::vector<std::pair<std::string, int>> e2e_policies(const BenchArgs& a, int context, int batch) {
  std::vector<std::pair<std::string, int>> out;
  if (!a.e2e_policy.empty()) {  // --e2e-policy: exactly these (no rectification timed); "none": no row
    for (const std::string& p : a.e2e_policy)
      if (p != "none") out.push_back({p, 0});
    return out;
  }
  out.push_back({"dense", 0});
  if (a.sparse_keep > 0) {
    // The paper's sparsity, n_min as it was before the SmolLM2 defaults raised it to 192
    // blocks (which would keep 3K tokens of every context and hide the mechanism); quest at
    // the same fraction per head, its floor off, every layer sparse.
    const std::string gbsa = fmt::format("gbsa:keep={},n_min={}", a.sparse_keep, kBenchMinBlocks),
                      quest = fmt::format("quest:budget={},min=0,dense_layers=0", a.sparse_keep);
    out.push_back({gbsa, 32});
    out.push_back({quest, 0});
    if (a.policy_defaults)
      out.push_back({fmt::format("streaming:sink=4,window={}", std::max(16, int(context * a.sparse_keep))), 0});
    if (batch >= 3) out.push_back({fmt::format("dense;{};{}", gbsa, quest), 0});
  }
  if (a.policy_defaults)
    for (const char* p : {"quest", "gbsa", "streaming"}) out.push_back({p, std::string(p) == "gbsa" ? 32 : 0});
  if (a.mac)  // MAC over a dense base at forced hit rates (issue 17): its step against dense's
    for (int hits : {0, 500, 900, 1000}) out.push_back({fmt::format("mac@hits={}", hits), 0});
  if (a.art) {
    // ART under its GPU rule over every page (random K/V: at its thresholds it may never stop,
    // which shows its cost), and with every round stable (a stop after round 2: what a stop
    // saves), over dense and over gbsa at --sparse-keep.
    const std::string rule = fmt::format("art:stop=group,test=probe,round={}", a.art_round / 4);
    out.push_back({"art:order=group," + rule.substr(4), 0});
    out.push_back({"art:order=group," + rule.substr(4) + ",patience=2,eps_scale=1000,eps_dir=2", 0});
    if (a.sparse_keep > 0) {
      out.push_back({fmt::format("gbsa:keep={},n_min={}+{},patience=2,eps_scale=1000,eps_dir=2", a.sparse_keep,
                                 kBenchMinBlocks, rule), 0});
      out.push_back({fmt::format("quest:budget={},min=0,dense_layers=0+{},patience=2,eps_scale=1000,eps_dir=2",
                                 a.sparse_keep, rule), 0});
      out.push_back({fmt::format("streaming:sink=4,window={}+{},patience=2,eps_scale=1000,eps_dir=2",
                                 std::max(16, int(context * a.sparse_keep)), rule), 0});
    }
  }
  return out;
}

std::vector<int> int_list(const std::string& s, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      int v = std::stoi(item, &used);
      SKIM_REQUIRE(used == item.size() && v > 0, "{}: '{}' is not a positive integer", flag, item);
      out.push_back(v);
    } catch (const std::logic_error&) {
      fail("{}: '{}' is not a positive integer", flag, item);
    }
  }
  SKIM_REQUIRE(!out.empty(), "{}: give at least one value", flag);
  return out;
}

// CSAttention's token-gather decode kernel at the same fraction (cs chooses single keys): its
// lists against the pages holding the same keys, and dense.
void bench_tokens(const BenchArgs& a, const ModelConfig& c, double bw, nlohmann::json& out) {
  std::printf("token decode attention (keep=%g of the context per KV head as scattered single keys, cs's top-K: "
              "gathered rows vs the pages holding them vs dense)\n", a.sparse_keep);
  std::printf("| batch | context | tokens us | pages us | dense us | pages held | MB read | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  out["token_attention"] = nlohmann::json::array();
  for (int b : int_list(a.attention_batches, "--attention-batches"))
    for (int ctx : int_list(a.attention_contexts, "--attention-contexts")) {
      auto p = cuda::bench_token_attention(b, ctx, c.num_heads, c.num_kv_heads, c.head_dim, a.sparse_keep);
      const double floor_us = p.bytes / bw * 1e6;
      std::printf("| %d | %d | %.1f | %.1f | %.1f | %.2f | %.1f | %.2f |\n", b, ctx, p.us, p.pages_us, p.dense_us,
                  p.page_fraction, p.bytes / 1e6, p.us / floor_us);
      std::fflush(stdout);
      out["token_attention"].push_back({{"batch", b}, {"context", ctx}, {"keep", p.keep}, {"us", p.us},
                                        {"pages_us", p.pages_us}, {"dense_us", p.dense_us},
                                        {"page_fraction", p.page_fraction}, {"bytes", p.bytes},
                                        {"floor_us", floor_us}});
    }
  std::printf("\n");
}

// CSAttention's decode search (cs_select) at the CPU policy's default table shape.
void bench_cs(const BenchArgs& a, const ModelConfig& c, double bw, nlohmann::json& out) {
  std::printf("cs_select (CSAttention's decode search: 4 subspaces x 64 centroids, lists of 0.2 x context, picks "
              "keep=%g of the context per KV head; random tables)\n", a.sparse_keep);
  std::printf("| batch | context | list entries | us | table MB read | candidates per search | backoffs | x table floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  out["cs_select"] = nlohmann::json::array();
  for (int b : int_list(a.attention_batches, "--attention-batches"))
    for (int ctx : int_list(a.attention_contexts, "--attention-contexts")) {
      auto p = cuda::bench_cs_select(b, ctx, c.num_kv_heads, c.head_dim, a.sparse_keep);
      const double floor_us = p.table_bytes / bw * 1e6;
      std::printf("| %d | %d | %d | %.1f | %.1f | %.0f | %.2f | %.2f |\n", b, ctx, p.list_capacity, p.us,
                  p.table_bytes / 1e6, p.candidates, p.backoff_fraction, p.us / floor_us);
      std::fflush(stdout);
      out["cs_select"].push_back({{"batch", b}, {"context", ctx}, {"keep", p.keep}, {"list_capacity", p.list_capacity},
                                  {"us", p.us}, {"table_bytes", p.table_bytes}, {"candidates", p.candidates},
                                  {"backoff_fraction", p.backoff_fraction}, {"floor_us", floor_us}});
    }
  std::printf("\n");
}

// ART decode attention with its stop forced at rounds 1, 2, 4, 8 and never, against dense; then
// quest+art where nothing stops.
void bench_art(const BenchArgs& a, const ModelConfig& c, double bw, nlohmann::json& out) {
  std::printf("ART decode attention (rounds of %d pages; eps so loose that the lists stop at round `patience`; "
              "lag: rounds read past the stop while it is tested)\n", a.art_round);
  std::printf("| batch | context | stop round | lag | read | us | dense us | speedup | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  out["art_attention"] = nlohmann::json::array();
  for (int b : int_list(a.attention_batches, "--attention-batches"))
    for (int ctx : int_list(a.attention_contexts, "--attention-contexts"))
      for (int patience : {1, 2, 4, 8, 1 << 20, -1}) {  // -1: never, and a lag that never waits
        auto p = cuda::bench_art_attention(b, ctx, c.num_heads, c.num_kv_heads, c.head_dim, a.art_round,
                                           patience < 0 ? 1 << 20 : patience, patience < 0 ? 1 << 20 : 0,
                                           a.art_max_warps);
        const double floor_us = p.bytes / bw * 1e6;
        std::printf("| %d | %d | %s | %d | %.3f | %.1f | %.1f | %.2fx | %.2f |\n", b, ctx,
                    p.stop_round < 0 ? "never" : std::to_string(p.stop_round).c_str(), std::min(p.lag, 99999),
                    p.read_fraction, p.us,
                    p.dense_us, p.dense_us / p.us, p.us / floor_us);
        std::fflush(stdout);
        out["art_attention"].push_back({{"batch", b}, {"context", ctx}, {"round_pages", p.round_pages},
                                        {"stop_round", p.stop_round}, {"lag", p.lag}, {"read_fraction", p.read_fraction},
                                        {"max_warps", p.max_warps}, {"us", p.us}, {"dense_us", p.dense_us},
                                        {"bytes", p.bytes},
                                        {"floor_us", floor_us}});
      }
  std::printf("\n");
  // Issue 16's compositions: ART over quest's unions, gbsa's kept pages and streaming's plan, where nothing
  // stops.
  if (a.sparse_keep <= 0) return;
  std::printf("quest+art decode attention (quest budget=%g, its unions in ART's order, then ART's kernel over them in "
              "rounds of %d pages; nothing stops: ART's cost over quest's)\n", a.sparse_keep, a.art_round);
  std::printf("| heads | batch | context | select us | select + attend us | dense us | union | MB read | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  out["quest_art_attention"] = nlohmann::json::array();
  for (bool agree : {false, true})
    for (int b : int_list(a.attention_batches, "--attention-batches"))
      for (int ctx : int_list(a.attention_contexts, "--attention-contexts")) {
        auto p = cuda::bench_quest_art_attention(b, ctx, c.num_heads, c.num_kv_heads, c.head_dim, a.sparse_keep, agree,
                                                 a.art_round);
        const double floor_us = p.bytes / bw * 1e6;
        std::printf("| %s | %d | %d | %.1f | %.1f | %.1f | %.2f | %.1f | %.2f |\n", agree ? "agree" : "independent", b,
                    ctx, p.select_us, p.us, p.dense_us, p.union_fraction, p.bytes / 1e6, p.us / floor_us);
        std::fflush(stdout);
        out["quest_art_attention"].push_back({{"batch", b}, {"context", ctx}, {"budget", p.budget},
                                              {"heads_agree", agree}, {"round_pages", a.art_round},
                                              {"select_us", p.select_us}, {"us", p.us}, {"dense_us", p.dense_us},
                                              {"union_fraction", p.union_fraction}, {"bytes", p.bytes},
                                              {"floor_us", floor_us}});
      }
  std::printf("\n");
  std::printf("gbsa+art decode attention (gbsa keep=%g, its kept pages in ART's order, then ART's kernel over them in "
              "rounds of %d pages; nothing stops: ART's cost over gbsa's)\n", a.sparse_keep, a.art_round);
  std::printf("| batch | context | select us | select + attend us | dense us | MB read | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  out["gbsa_art_attention"] = nlohmann::json::array();
  for (int b : int_list(a.attention_batches, "--attention-batches"))
    for (int ctx : int_list(a.attention_contexts, "--attention-contexts")) {
      auto p = cuda::bench_group_sparse_attention(b, ctx, c.num_heads, c.num_kv_heads, c.head_dim, a.sparse_keep,
                                                  a.art_round);
      const double floor_us = p.bytes / bw * 1e6;
      std::printf("| %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f |\n", b, ctx, p.select_us, p.us, p.dense_us,
                  p.bytes / 1e6, p.us / floor_us);
      std::fflush(stdout);
      out["gbsa_art_attention"].push_back({{"batch", b}, {"context", ctx}, {"keep", p.keep},
                                           {"round_pages", a.art_round}, {"select_us", p.select_us}, {"us", p.us},
                                           {"dense_us", p.dense_us}, {"bytes", p.bytes}, {"floor_us", floor_us}});
    }
  std::printf("\n");
  std::printf("streaming and streaming+art decode attention (4 sink tokens and a window of %g of the context in whole "
              "pages; +art: newest first, ART's kernel in rounds of %d pages, nothing stops)\n", a.sparse_keep,
              a.art_round);
  std::printf("| policy | batch | context | plan us | plan + attend us | dense us | MB read | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  out["streaming_attention"] = nlohmann::json::array();
  for (int art_round : {0, a.art_round})
    for (int b : int_list(a.attention_batches, "--attention-batches"))
      for (int ctx : int_list(a.attention_contexts, "--attention-contexts")) {
        auto p = cuda::bench_streaming_attention(b, ctx, c.num_heads, c.num_kv_heads, c.head_dim, a.sparse_keep,
                                                 art_round);
        const double floor_us = p.bytes / bw * 1e6;
        std::printf("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f |\n", art_round ? "streaming+art" : "streaming",
                    b, ctx, p.select_us, p.us, p.dense_us, p.bytes / 1e6, p.us / floor_us);
        std::fflush(stdout);
        out["streaming_attention"].push_back({{"batch", b}, {"context", ctx}, {"keep", p.keep}, {"art", art_round > 0},
                                              {"round_pages", art_round}, {"select_us", p.select_us}, {"us", p.us},
                                              {"dense_us", p.dense_us}, {"bytes", p.bytes}, {"floor_us", floor_us}});
      }
  std::printf("\n");
}

// Paged prefill attention of the 8B layer shape, both tile sizes: a whole causal prompt in one
// call (SDPA's shape: bench/attention/sdpa_prefill_bench.py times the same), a 2048-token chunk
// and a 32-row chunk (ReSA's rectification) at the end of each context.
void bench_prefill_attention(const BenchArgs& a, const ModelConfig& c, double bw, nlohmann::json& out) {
  std::printf("paged prefill attention, Llama-3.1-8B layer (32 q / 8 KV heads of 128), causal, bf16 paged KV; "
              "rows at the end of the context\n");
  std::printf("| context | rows | kernel | us | TFLOP/s | x bytes floor |\n|---|---|---|---|---|---|\n");
  out["prefill_attention"] = nlohmann::json::array();
  const char* names[] = {"mma 64 rows", "mma 128 rows", "wgmma", "wgmma warp-specialised", "wgmma ping-pong"};
  for (int ctx : int_list(a.prefill_attention, "--prefill-attention"))
    for (int rows : {ctx, 2048, 32})
      for (auto kernel : {cuda::PrefillKernel::kMma64, cuda::PrefillKernel::kMma128, cuda::PrefillKernel::kWgmma,
                          cuda::PrefillKernel::kWgmmaWs, cuda::PrefillKernel::kWgmmaPingpong}) {
        if (rows != ctx && rows >= ctx) continue;  // the chunks are shorter than the prompt
        if (!cuda::prefill_kernel_available(kernel)) continue;
        auto p = cuda::bench_prefill_attention(ctx, rows, c.num_heads, c.num_kv_heads, c.head_dim, kernel);
        const double floor_us = p.bytes / bw * 1e6;
        const char* name = names[int(kernel)];
        std::printf("| %d | %d | %s | %.1f | %.1f | %.2f |\n", ctx, rows, name, p.us, p.flops / p.us / 1e6,
                    p.us / floor_us);
        std::fflush(stdout);
        out["prefill_attention"].push_back({{"context", ctx}, {"rows", rows}, {"kernel", name}, {"us", p.us},
                                            {"flops", p.flops}, {"bytes", p.bytes}, {"floor_us", floor_us}});
      }
  std::printf("\n");
}

// Tensor parallelism: greedy decode steps of a random-weight shape over each --tp size, dense
// and gbsa/quest at --sparse-keep, against one GPU's bytes floor plus the all-reduces.
void bench_tp(const BenchArgs& a, double bw, nlohmann::json& out) {
  SKIM_REQUIRE(a.shape == "8b" || a.shape == "70b", "--shape: 8b or 70b, got '{}'", a.shape);
  const ModelConfig c = a.shape == "8b" ? cuda::llama31_8b_config() : cuda::llama31_70b_config();
  std::vector<std::string> policies = {"dense"};
  if (a.sparse_keep > 0) {
    policies.push_back(fmt::format("gbsa:keep={},n_min={}", a.sparse_keep, kBenchMinBlocks));
    policies.push_back(fmt::format("quest:budget={},min=0,dense_layers=0", a.sparse_keep));
  }
  std::printf("tensor parallelism, random Llama-3.1-%s shape: greedy decode steps (CUDA graphs), %d steps after a "
              "random-KV context; per GPU: weights and KV read, one all-reduce of the step's rows (%d per step)\n",
              a.shape == "8b" ? "8B" : "70B", a.steps, 2 * c.num_layers + 1);
  std::printf("| tp | policy | batch | context | ms/token | weights MB/GPU | KV MB/GPU | all-reduce us | floor ms | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  out["tensor_parallel"] = nlohmann::json::array();
  for (int tp : int_list(a.tp, "--tp"))
    for (int b : int_list(a.batches, "--batches"))
      for (int ctx : int_list(a.contexts, "--contexts"))
        for (const std::string& policy : policies) {
          cuda::TensorParallelPoint p;
          try {
            p = cuda::bench_tensor_parallel(c, tp, b, ctx, a.steps, policy, bw);
          } catch (const Error& e) {  // a point that does not fit the GPUs: said, and the next one runs
            std::printf("| %d | %s | %d | %d | %s | | | | | |\n", tp, policy.c_str(), b, ctx, e.what());
            out["tensor_parallel"].push_back({{"shape", a.shape}, {"tp", tp}, {"policy", policy}, {"batch", b},
                                              {"context", ctx}, {"error", e.what()}});
            continue;
          }
          std::printf("| %d | %s | %d | %d | %.3f | %.0f | %.0f | %.1f | %.3f | %.2f |\n", tp, policy.c_str(), b, ctx,
                      p.ms_per_step, p.weight_bytes / 1e6, p.kv_bytes / 1e6, p.all_reduce_us, p.floor_ms,
                      p.ms_per_step / p.floor_ms);
          std::fflush(stdout);
          out["tensor_parallel"].push_back({{"shape", a.shape}, {"tp", tp}, {"policy", policy}, {"batch", b},
                                            {"context", ctx}, {"steps", p.steps}, {"ms_per_token", p.ms_per_step},
                                            {"weight_bytes_per_gpu", p.weight_bytes}, {"kv_bytes_per_gpu", p.kv_bytes},
                                            {"all_reduce_us", p.all_reduce_us}, {"all_reduces", p.all_reduces},
                                            {"floor_ms", p.floor_ms}, {"ratio_to_floor", p.ms_per_step / p.floor_ms}});
        }
}

void run_bench(const BenchArgs& a) {
  cuda::require_device("skim bench");
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double bw = cuda::copy_bandwidth();
  std::printf("device: %s, %d SMs; device-to-device copy %.0f GB/s (read + write)\n\n", prop.name,
              prop.multiProcessorCount, bw / 1e9);
  nlohmann::json out = {{"device", prop.name}, {"sms", prop.multiProcessorCount}, {"copy_GBps", bw / 1e9}};
  if (!a.tp.empty()) {
    int devices = 0;
    cuda::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    out["devices"] = devices;
    bench_tp(a, bw, out);
    if (!a.json_path.empty()) {
      std::ofstream f(a.json_path);
      SKIM_REQUIRE(f.good(), "--json: cannot write '{}'", a.json_path);
      f << out.dump(1) << "\n";
    }
    return;
  }

  if (!a.e2e_only) {
    const ModelConfig c = cuda::llama31_8b_config();
    std::printf("decode attention, Llama-3.1-8B layer (32 q / 8 KV heads of 128), bf16 paged KV\n");
    std::printf("| batch | context | us | MB moved | fraction of copy bw |\n|---|---|---|---|---|\n");
    out["attention"] = nlohmann::json::array();
    for (int b : int_list(a.attention_batches, "--attention-batches"))
      for (int ctx : int_list(a.attention_contexts, "--attention-contexts")) {
        auto p = cuda::bench_decode_attention(b, ctx, c.num_heads, c.num_kv_heads, c.head_dim, bw);
        std::printf("| %d | %d | %.1f | %.1f | %.2f |\n", b, ctx, p.us, p.bytes / 1e6, p.fraction);
        std::fflush(stdout);
        out["attention"].push_back({{"batch", b}, {"context", ctx}, {"us", p.us}, {"bytes", p.bytes},
                                    {"fraction_of_copy_bw", p.fraction}});
      }
    std::printf("\n");
    if (a.sparse_keep > 0) {
      std::printf("group-sparse decode attention (gbsa keep=%g: page selection on the digests + attention over the kept pages)\n",
                  a.sparse_keep);
      std::printf("| batch | context | select us | select + attend us | dense us | speedup | MB read | x floor |\n");
      std::printf("|---|---|---|---|---|---|---|---|\n");
      out["sparse_attention"] = nlohmann::json::array();
      for (int b : int_list(a.attention_batches, "--attention-batches"))
        for (int ctx : int_list(a.attention_contexts, "--attention-contexts")) {
          auto p = cuda::bench_group_sparse_attention(b, ctx, c.num_heads, c.num_kv_heads, c.head_dim, a.sparse_keep);
          const double floor_us = p.bytes / bw * 1e6;
          std::printf("| %d | %d | %.1f | %.1f | %.1f | %.2fx | %.1f | %.2f |\n", b, ctx, p.select_us, p.us, p.dense_us,
                      p.dense_us / p.us, p.bytes / 1e6, p.us / floor_us);
          std::fflush(stdout);
          out["sparse_attention"].push_back({{"batch", b}, {"context", ctx}, {"keep", p.keep}, {"select_us", p.select_us},
                                             {"us", p.us}, {"dense_us", p.dense_us}, {"bytes", p.bytes},
                                             {"floor_us", floor_us}});
        }
      std::printf("\n");
      std::printf("quest decode attention (budget=%g of the context per query head, min=0: per-head page selection + "
                  "masked attention over the union per KV head; random digests; heads: independent queries (the "
                  "union near group x budget) or agreeing (one query per group: the union is the budget))\n",
                  a.sparse_keep);
      std::printf("| heads | batch | context | select us | select + attend us | dense us | speedup | union | "
                  "MB read | x floor |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
      out["quest_attention"] = nlohmann::json::array();
      for (bool agree : {false, true})
        for (int b : int_list(a.attention_batches, "--attention-batches"))
          for (int ctx : int_list(a.attention_contexts, "--attention-contexts")) {
            auto p = cuda::bench_quest_attention(b, ctx, c.num_heads, c.num_kv_heads, c.head_dim, a.sparse_keep, agree);
            const double floor_us = p.bytes / bw * 1e6;
            std::printf("| %s | %d | %d | %.1f | %.1f | %.1f | %.2fx | %.2f | %.1f | %.2f |\n",
                        agree ? "agree" : "independent", b, ctx, p.select_us, p.us, p.dense_us,
                        p.dense_us / p.us, p.union_fraction, p.bytes / 1e6, p.us / floor_us);
            std::fflush(stdout);
            out["quest_attention"].push_back({{"batch", b}, {"context", ctx}, {"budget", p.budget},
                                              {"heads_agree", agree}, {"select_us", p.select_us}, {"us", p.us},
                                              {"dense_us", p.dense_us}, {"union_fraction", p.union_fraction},
                                              {"bytes", p.bytes}, {"floor_us", floor_us}});
          }
      std::printf("\n");
      bench_tokens(a, c, bw, out);
      bench_cs(a, c, bw, out);
    }
    if (a.art) bench_art(a, c, bw, out);
    if (!a.prefill_attention.empty()) bench_prefill_attention(a, c, bw, out);
  }

  std::vector<std::pair<std::string, std::shared_ptr<const cuda::GpuWeights>>> models;
  if (!a.attention_only) {
    std::filesystem::path dir = a.model_dir.empty() ? default_model_dir() : a.model_dir;
    if (!a.only_8b)
      models.emplace_back(dir.filename().string(),
                          std::make_shared<const cuda::GpuWeights>(cuda::upload_weights(*load_model(dir))));
    if (!a.no_8b)
      models.emplace_back("random Llama-3.1-8B shape",
                          std::make_shared<const cuda::GpuWeights>(cuda::random_weights(cuda::llama31_8b_config(), 1)));
    std::printf("end-to-end greedy decode step (CUDA graph), %d steps after a random-KV context\n", a.steps);
    std::printf("| model | policy | batch | context | ms/token | weights MB | KV MB | floor ms | x floor |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    out["end_to_end"] = nlohmann::json::array();
    for (auto& [name, w] : models)
      for (int b : int_list(a.batches, "--batches"))
        for (int ctx : int_list(a.contexts, "--contexts"))
          for (const auto& [policy, rectify_f] : e2e_policies(a, ctx, b)) {
            auto p = cuda::bench_end_to_end(w, b, ctx, a.steps, bw, policy, rectify_f, !a.no_dense_fallback,
                                            a.host_kv_slots, a.host_kv_prefetch && a.host_kv_slots != 0);
            std::string shown = p.dense_fallback_rows > 0 ? policy + " (dense fallback)" : policy;
            // cs maps no pages: its kernel reads the picked rows from the host pools in place.
            if (a.host_kv_slots != 0 && policy.rfind("cs", 0) == 0)
              shown += " (host KV: the picked rows read over PCIe in place)";
            else if (a.host_kv_slots != 0)
              shown += fmt::format(" (host KV, {} slots: {:.1f} MB copied a step, {:.1f}% hits{})", p.host_slots,
                                   p.host_copy_bytes_per_step / 1e6, 100.0 * p.host_hit_rate,
                                   a.host_kv_prefetch && p.host_prefetch_bytes_per_step > 0
                                       ? fmt::format(", {:.1f} MB copied ahead", p.host_prefetch_bytes_per_step / 1e6)
                                       : "");
            std::printf("| %s | %s | %d | %d | %.3f | %.0f | %.0f | %.3f | %.2f |\n", name.c_str(), shown.c_str(), b,
                        ctx, p.ms_per_step, p.weight_bytes / 1e6, p.kv_bytes / 1e6, p.floor_ms,
                        p.ms_per_step / p.floor_ms);
            std::fflush(stdout);
            out["end_to_end"].push_back({{"model", name}, {"policy", policy}, {"batch", b}, {"context", ctx},
                                         {"steps", p.steps}, {"ms_per_token", p.ms_per_step},
                                         {"weight_bytes", p.weight_bytes}, {"kv_bytes", p.kv_bytes},
                                         {"floor_ms", p.floor_ms}, {"ratio_to_floor", p.ms_per_step / p.floor_ms},
                                         {"dense_fallback_rows", p.dense_fallback_rows},
                                         {"host_kv_slots", a.host_kv_slots}, {"host_slots", p.host_slots},
                                         {"host_copy_bytes_per_step", p.host_copy_bytes_per_step},
                                         {"host_kv_prefetch", a.host_kv_prefetch && a.host_kv_slots != 0},
                                         {"host_prefetch_bytes_per_step", p.host_prefetch_bytes_per_step},
                                         {"host_hit_rate", p.host_hit_rate}});
            if (p.rectify_f > 0) {
              std::printf("| %s | %s + rectify:f=%d (rectification %.3f ms / %d steps) | %d | %d | %.3f | | | | |\n",
                          name.c_str(), policy.c_str(), p.rectify_f, p.rectify_ms, p.rectify_f, b, ctx,
                          p.ms_per_step + p.rectify_ms_per_step);
              out["end_to_end"].back()["rectify_f"] = p.rectify_f;
              out["end_to_end"].back()["rectify_ms"] = p.rectify_ms;
              out["end_to_end"].back()["resa_ms_per_token"] = p.ms_per_step + p.rectify_ms_per_step;
            }
          }
  }
  if (!a.attention_only && a.retro) {
    std::printf("\nRetroAttention over quest (budget %g, every layer): ms per decode step, host-timed run() steps%s\n",
                a.sparse_keep, a.host_kv_slots != 0 ? ", the K/V in host memory (--host-kv-slots)" : "");
    std::printf("| model | batch | context | quest | w, ms (x quest) ... |\n|---|---|---|---|---|\n");
    out["retro"] = nlohmann::json::array();
    const std::string quest = fmt::format("quest:budget={},min=0,dense_layers=0", a.sparse_keep);
    for (auto& [name, w] : models)
      for (int b : int_list(a.batches, "--batches"))
        for (int ctx : int_list(a.contexts, "--contexts")) {
          const double base = cuda::bench_retro_steps(w, b, ctx, a.steps, quest, 1, a.host_kv_slots);
          std::printf("| %s | %d | %d | %.3f |", name.c_str(), b, ctx, base);
          out["retro"].push_back({{"model", name}, {"batch", b}, {"context", ctx}, {"base", quest}, {"ms_base", base},
                                  {"host_kv_slots", a.host_kv_slots}});
          for (int win : int_list(a.retro_windows, "--retro-windows")) {
            const double ms = cuda::bench_retro_steps(w, b, ctx, a.steps, quest, win, a.host_kv_slots);
            std::printf(" w=%d %.3f (%.2fx) |", win, ms, ms / base);
            out["retro"].back()[fmt::format("ms_w{}", win)] = ms;
          }
          std::printf("\n");
          std::fflush(stdout);
        }
  }
  if (!a.attention_only && !a.no_prefill) {
    std::printf("\nprefill (chunks of %d tokens, pseudo-random ids), tokens/s\n", a.chunk);
    std::printf("| model | context | tokens/s |\n|---|---|---|\n");
    out["prefill"] = nlohmann::json::array();
    for (auto& [name, w] : models)
      for (int ctx : int_list(a.prefill_contexts, "--prefill-contexts")) {
        if (name != models.front().first && ctx > a.prefill_8b_max) continue;  // the 8B shape: see --prefill-8b-max
        const double tps = cuda::bench_prefill(w, ctx, a.chunk);
        std::printf("| %s | %d | %.0f |\n", name.c_str(), ctx, tps);
        std::fflush(stdout);
        out["prefill"].push_back({{"model", name}, {"context", ctx}, {"chunk", a.chunk}, {"tokens_per_s", tps}});
      }
  }
  if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    SKIM_REQUIRE(f.good(), "--json: cannot write '{}'", a.json_path);
    f << out.dump(1) << "\n";
  }
}
#endif

}  // namespace

void register_bench(CLI::App& root, std::function<void()>& run) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* app = root.add_subcommand("bench", "GPU decode speed against the bandwidth floor");
  BenchArgs& a = *args;
  app->add_option("-m,--model", a.model_dir, "model for the end-to-end steps (default: the demo model)");
  app->add_option("--contexts", a.contexts, "end-to-end contexts, tokens")->capture_default_str();
  app->add_option("--batches", a.batches, "end-to-end batch sizes")->capture_default_str();
  app->add_option("--steps", a.steps, "timed decode steps per point")->capture_default_str();
  app->add_option("--attention-contexts", a.attention_contexts, "decode attention contexts")->capture_default_str();
  app->add_option("--attention-batches", a.attention_batches, "decode attention batch sizes")->capture_default_str();
  app->add_flag("--attention-only", a.attention_only, "only the decode attention kernels");
  app->add_option("--sparse-keep", a.sparse_keep,
                  "also time group-sparse decode attention keeping this fraction of pages (0: skip)")
      ->capture_default_str();
  app->add_flag("--e2e-only", a.e2e_only, "only the end-to-end steps");
  app->add_flag("--policy-defaults", a.policy_defaults,
                "also the end-to-end steps of the GPU policies at their defaults (and streaming at --sparse-keep)");
  app->add_flag("--retro", a.retro,
                 "RetroAttention's decode steps over quest at --sparse-keep, w = 2, 4, 8, against quest's (host-timed run() "
                 "steps, the newest rows' logits)");
  app->add_flag("--mac", a.mac,
                 "end-to-end: mac over dense at forced hit rates 0, 50, 90 and 100% (label mac@hits=N per mille)");
  app->add_flag("--art", a.art,
                "also the ART decode attention kernel at forced stops and over quest's unions (--attention-only), "
                "and ART policies end to end (their KV bytes as counted on the device)");
  app->add_option("--art-round", a.art_round, "ART's round for --art, pages (a multiple of 4)")->capture_default_str();
  app->add_option("--art-max-warps", a.art_max_warps, "ART's warps per list for --art (0: paged decode's split)")
      ->capture_default_str();
  app->add_flag("--no-8b", a.no_8b, "skip the random Llama-3.1-8B-shaped model");
  app->add_flag("--8b-only", a.only_8b, "end to end: the random Llama-3.1-8B-shaped model alone (not the demo model)");
  app->add_option("--e2e-policy", a.e2e_policy,
                  "end to end: this policy's row instead of the default ones (repeatable; POLICY@hits=N forces MAC's "
                  "hit rate; policies joined by ';' mix in one batch; none: no row, e.g. for --retro alone)");
  app->add_option("--retro-windows", a.retro_windows, "--retro's windows w")->capture_default_str();
  CLI::Option* slots = add_host_kv_slots_flag(*app, a.host_kv_slots,
                         "end to end: the K/V pools in pinned host memory, each step's selected pages read through "
                         "a device cache of N pages per layer and KV head (KV beyond GPU memory; auto: as many as "
                         "the GPU's free memory holds, less a reserve; 0: on the GPU)")
      ->check(CLI::Range(kHostKvSlotsAuto, int(kHostKvMaxSlots)));
  add_host_kv_prefetch_flags(*app, a.host_kv_prefetch, slots);
  app->add_flag("--no-dense-fallback", a.no_dense_fallback,
                "end to end: sparse policies select at every step, even where attending every key is faster "
                "(the engine's default falls back to dense there)");
  app->add_option("--prefill-contexts", a.prefill_contexts, "prefill lengths (the 8B shape: up to --prefill-8b-max)")
      ->capture_default_str();
  app->add_option("--prefill-8b-max", a.prefill_8b_max,
                  "longest prefill of the 8B shape (time to first token at 32K and 128K: 131072)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--chunk", a.chunk, "prefill chunk, tokens")->capture_default_str();
  app->add_flag("--no-prefill", a.no_prefill, "skip the prefill measurement");
  app->add_option("--prefill-attention", a.prefill_attention,
                  "also the prefill attention kernel (8B layer shape) at these contexts: a whole causal prompt, a "
                  "2048-token and a 32-row chunk at the end of each");
  app->add_option("--tp", a.tp,
                  "only tensor parallelism: decode steps of a random --shape model split over each of these GPU "
                  "counts (e.g. 1,2), dense and gbsa/quest at --sparse-keep");
  app->add_option("--shape", a.shape, "--tp's model shape: 8b or 70b (Llama-3.1)")->capture_default_str();
  app->add_option("--json", a.json_path, "also write the results to this JSON file");
  app->callback([args, &run] {
    run = [args] {
      SKIM_REQUIRE(args->steps > 0, "--steps must be positive");
      SKIM_REQUIRE(args->chunk > 0, "--chunk must be positive");
      SKIM_REQUIRE(args->sparse_keep >= 0 && args->sparse_keep <= 1, "--sparse-keep must be in [0, 1]");
#ifdef SKIM_HAVE_CUDA
      run_bench(*args);
#else
      fail("skim bench measures the CUDA backend, and this skim was built without CUDA "
           "(the CPU comparison is bench/cpu_decode_bench.py)");
#endif
    };
  });
}

}  // namespace skim::cli
