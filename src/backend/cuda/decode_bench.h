// What `skim bench` measures on the GPU: the copy bandwidth that bounds a decode step, the
// paged decode attention kernel alone, and whole decode steps of a model (time per output
// token against (weight bytes + KV bytes) / bandwidth).
#pragma once

#include <memory>
#include <string>

#include "backend/cuda/gpu_forward.h"
#include "backend/cuda/gpu_weights.h"
#include "backend/cuda/paged_prefill_attention.cuh"

namespace skim::cuda {

// Device-to-device cudaMemcpy of `bytes`, best of several: bytes read + written per second.
double copy_bandwidth(size_t bytes = size_t(1) << 30);

struct AttentionPoint {
  int batch = 0, context = 0;
  double us = 0;        // mean time of one call (a graph of calls, back to back)
  double bytes = 0;     // K/V + q + o bytes one call moves
  double fraction = 0;  // (bytes / us) / copy bandwidth
};

// Paged decode attention on random bf16 pages: `batch` sequences of `context` tokens, rotating
// among enough copies of the cache that every call reads HBM, not L2.
AttentionPoint bench_decode_attention(int batch, int context, int num_heads, int num_kv_heads,
                                      int head_dim, double copy_bw);

struct SparseAttentionPoint {
  int batch = 0, context = 0;
  double keep = 0;
  double select_us = 0;     // group page selection alone (scores over the digests + top-n)
  double us = 0;            // selection + decode attention over the kept pages, one call
  double dense_us = 0;      // dense decode attention on the same cache, same run
  double bytes = 0;         // digests + kept K/V + q + o per call
};

// ReSA/gbsa-style decode on the GPU: group_page_select then paged_decode_attention over each
// (sequence, KV head)'s kept pages, on random pages and digests, rotating among copies like
// bench_decode_attention. art_round_pages > 0: gbsa+art instead, the kept pages in bound order
// (by_score) and ART's kernel over them in rounds of that many pages, its patience past the last
// round (nothing stops: ART's cost over gbsa's).
SparseAttentionPoint bench_group_sparse_attention(int batch, int context, int num_heads, int num_kv_heads,
                                                  int head_dim, double keep, int art_round_pages = 0);

// StreamingLLM's plan (4 sink tokens, a window of keep x context tokens, whole pages:
// window_page_plan) then paged decode attention over it; art_round_pages > 0: streaming+art, the
// plan newest first and ART's kernel over it, its patience past the last round. select_us is the
// plan's; bytes count no digests.
SparseAttentionPoint bench_streaming_attention(int batch, int context, int num_heads, int num_kv_heads, int head_dim,
                                               double keep, int art_round_pages = 0);

struct QuestAttentionPoint {
  int batch = 0, context = 0;
  double budget = 0;        // fraction of the context per query head
  double select_us = 0;     // quest_page_select alone (scores per head + top-n + union)
  double us = 0;            // selection + masked decode attention over the union, one call
  double dense_us = 0;      // dense decode attention on the same cache, same run
  double union_fraction = 0;  // pages listed per (sequence, KV head) / the sequence's pages
  double bytes = 0;         // digests + the union's K/V + q + o per call
  bool heads_agree = false;  // every head of a group had its group's first head's query
};

// Quest on the GPU: quest_page_select then the masked paged_decode_attention over each
// (sequence, KV head)'s union, on random pages and digests, rotating among copies like
// bench_decode_attention. Independent random queries make the union near its largest (about
// group x budget); heads_agree gives every head of a group the same query, so the union is the
// budget: a real model's correlated heads lie between (SmolLM2 at budget 0.1: 1.5x the budget).
QuestAttentionPoint bench_quest_attention(int batch, int context, int num_heads, int num_kv_heads, int head_dim,
                                          double budget, bool heads_agree);

// quest+art: the same selection in ART's order (by_score), then ART's decode kernel over each
// union with the patience past the last round (nothing stops: ART's cost over quest's alone;
// rounds of round_pages), against dense in the same run. Issue 16's compositions.
QuestAttentionPoint bench_quest_art_attention(int batch, int context, int num_heads, int num_kv_heads, int head_dim,
                                              double budget, bool heads_agree, int round_pages);

struct TokenAttentionPoint {
  int batch = 0, context = 0;
  double keep = 0;        // fraction of the context each list holds (scattered positions)
  double us = 0;          // token decode attention over the lists, one call
  double pages_us = 0;    // paged decode attention over the pages holding those tokens
  double dense_us = 0;    // dense decode attention on the same cache, same run
  double page_fraction = 0;  // pages holding a chosen token / the sequence's pages
  double bytes = 0;       // the chosen K/V rows + lists + q + o per call
};

// CSAttention's decode kernel on the GPU: token_decode_attention over one list per (sequence,
// KV head) of keep x context random positions (what cs's top-K looks like to the cache), against
// reading the pages that hold them (the page-granular alternative) and dense, same run.
TokenAttentionPoint bench_token_attention(int batch, int context, int num_heads, int num_kv_heads, int head_dim,
                                          double keep);

struct CsSelectPoint {
  int batch = 0, context = 0, list_capacity = 0;
  double keep = 0;             // picks: keep x context per search
  double us = 0;               // cs_select, one call for every (sequence, KV group)
  double table_bytes = 0;      // list entries and tails read per call (the search's own count)
  double candidates = 0;       // keys touched per search
  double backoff_fraction = 0;  // subspace searches that widened to two lists
};

// CSAttention's decode search on the GPU: cs_select over random tables of the CPU policy's
// default shape (4 subspaces of 64 centroids, lists of 0.2 x context entries, back-off to 2
// lists below cosine 0.3) for each (sequence, KV head), picking keep x context keys below a
// 64-key window. The token gather over the picks is bench_token_attention's.
CsSelectPoint bench_cs_select(int batch, int context, int num_kv_heads, int head_dim, double keep);

struct ArtAttentionPoint {
  int batch = 0, context = 0, round_pages = 0, lag = 0, max_warps = 0;
  int stop_round = -1;       // the round whose test stops every list (-1: none; patience out of reach)
  double read_fraction = 0;  // pages read / pages listed (the device's counters)
  double us = 0;             // ART decode attention, one call
  double dense_us = 0;       // paged decode attention on the same cache, same run
  double bytes = 0;          // K/V read + q + o
};

// ART decode attention on random pages in position order, its stop forced: eps so loose that
// every round after the first is stable, so the lists stop at round `patience` (or never, with
// patience past the last round: the test's cost alone), against dense in the same run.
// lag > 0 replaces the kernel's (art_decode_lag): a lag past the last round never waits for a
// verdict, which isolates the cost of the tests from the waits.
ArtAttentionPoint bench_art_attention(int batch, int context, int num_heads, int num_kv_heads, int head_dim,
                                      int round_pages, int patience, int lag = 0, int max_warps = 0);

struct PrefillAttentionPoint {
  int context = 0, rows = 0;
  PrefillKernel kernel = PrefillKernel::kMma128;
  double us = 0;      // one call (a graph of calls, back to back)
  double flops = 0;   // 4 x head_dim x num_heads x the (row, key) pairs the causal mask keeps
  double bytes = 0;   // K/V of the prefix + q + o, each read or written once
};

// Paged prefill attention of one sequence on random bf16 pages: `rows` query rows at the end of
// a `context`-token prefix (rows = context: a whole prompt in one chunk, the shape SDPA's causal
// prefill is timed on; a few rows: ReSA's rectification), with the kernel given.
PrefillAttentionPoint bench_prefill_attention(int context, int rows, int num_heads, int num_kv_heads, int head_dim,
                                              PrefillKernel kernel);

struct EndToEndPoint {
  int batch = 0, context = 0, steps = 0;
  double ms_per_step = 0;
  double weight_bytes = 0;  // read per step: every weight but the embedding table's unread rows
  double kv_bytes = 0;      // K/V (and digests) read per step, mean over the steps
  double floor_ms = 0;      // (weight + KV bytes) / copy bandwidth
  uint64_t dense_fallback_rows = 0;  // decode rows (warm-up included) whose policy fell back to dense
  // KV beyond GPU memory (host_kv_slots > 0): bytes copied into the device cache per timed step,
  // and the share of listed (page, KV head) pieces it already held.
  double host_copy_bytes_per_step = 0, host_hit_rate = 0;
  double host_prefetch_bytes_per_step = 0;  // with host_kv_prefetch: copied ahead, by guess (beside the above)
  int host_slots = 0;  // the device cache's slots (what `auto` chose)
  // Sparse runs: one ReSA rectification of the batch (each sequence's last rectify_f tokens
  // re-run as a dense prefill over its context), and that time spread over the f steps it
  // covers: what `resa` adds per token to gbsa's step.
  int rectify_f = 0;
  double rectify_ms = 0;
  double rectify_ms_per_step = 0;
};

// Greedy decode steps (CUDA graph, tokens fed back on the device) after a context of
// `context` tokens per sequence whose K/V and digests are random (no prefill: only the step is
// timed); `policy` plans the decode steps (the GPU's planners; several separated by ';' are
// given to the sequences in turn, one mixed batch), and a sparse one also times a
// rectification of `rectify_f` tokens. "POLICY@hits=N" forces its MAC rows' hit rate (per
// mille; the match still scans the ring, a hit's band+tail is read and its prefix reused).
// dense_fallback: GpuForwardOptions::dense_fallback of the forward (the engine's default: on);
// host_kv_slots: GpuForwardOptions::host_kv_slots (> 0: the K/V pools in host memory), and
// host_kv_prefetch its copies ahead.
EndToEndPoint bench_end_to_end(std::shared_ptr<const GpuWeights> weights, int batch, int context, int steps, double copy_bw,
                               const std::string& policy = "dense", int rectify_f = 32,
                               bool dense_fallback = true, int host_kv_slots = 0, bool host_kv_prefetch = false);

// RetroAttention's decode steps against its base's, the same way: per step a forward pass of
// each sequence's newest token after its last w-1 tokens (w = 1: the base alone), as the engine
// batches them (one CUDA graph, the newest rows' logits gathered), timed on the host around
// run() (which waits for the logits), after 4 warm-up steps: ms per step. host_kv_slots:
// GpuForwardOptions::host_kv_slots.
double bench_retro_steps(std::shared_ptr<const GpuWeights> weights, int batch, int context, int steps,
                         const std::string& base, int w, int host_kv_slots = 0);

// Prefill of `context` tokens (pseudo-random ids) in chunks of `chunk`, logits of the last
// row only, timed on the host around the whole prompt: tokens per second.
double bench_prefill(std::shared_ptr<const GpuWeights> weights, int context, int chunk);

// Llama-3.1-8B's shape (32 layers, 32 query / 8 KV heads of 128, 14336 MLP, vocab 128256).
ModelConfig llama31_8b_config();
// The KV cache of `batch` sequences of up to `tokens` tokens each, in 16-token pages.
KVCacheShape bench_cache_shape(const ModelConfig& config, int batch, int tokens);

// Llama-3.1-70B's (80 layers, hidden 8192, 64 query / 8 KV heads of 128, 28672 MLP).
ModelConfig llama31_70b_config();

}  // namespace skim::cuda
