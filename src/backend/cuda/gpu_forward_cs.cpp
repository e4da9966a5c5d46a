// CSAttention in the GPU forward (first cut, issue 18; the CPU form is attention/csattn.cpp): a
// prefill chunk of a cs sequence samples its queries into the sequence's slot of cuda::CsState;
// its first decode step builds the tables (host code, before the step's graph); each decode
// step's indexed layer inserts the rows' new keys, searches, and attends the token plan (picks +
// window) with the token-gather kernel over the rows' own pages, over KV beyond GPU memory too
// (attend_cs says why). A step's cs rows are its first (launch() puts them there); the other
// rows attend their page plan after them (attend_decode).
#include <cmath>

#include "backend/cuda/gpu_forward.h"
#include "backend/cuda/gpu_inputs.h"
#include "backend/cuda/token_decode_attention.cuh"

namespace skim::cuda {

void GpuForward::reserve_cs(int index, bool& moved) {
  const CsParams* p = planner_->cs_params(index);
  if (!p) return;
  const std::string& policy = planner_->policy(index);
  if (cs_ && cs_policy_ == policy) return;
  SKIM_REQUIRE(!opt_.shard, "policy {}: cs on the GPU does not run with tensor parallelism yet", policy);
  const ModelConfig& c = w_.config;
  const int ps = cache_.shape().page_size, max_context = opt_.max_pages_per_seq * ps;
  // A cs step decodes one row per sequence: its scratch (token lists of a context each) is sized
  // by the sequences the cache holds, not by a prefill chunk's rows.
  const int decode_rows = sequence_rows();
  check(cudaStreamSynchronize(stream_), "forward pass");
  cs_ = std::make_unique<CsState>(CsStateShape{.num_layers = c.num_layers, .num_heads = c.num_heads,
                                               .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                                               .page_size = ps, .max_rows = decode_rows,
                                               .max_context = max_context},
                                  *p);
  cs_policy_ = policy;
  TokenDecodeArgs t{.attn = PagedDecodeArgs{.batch = decode_rows, .num_heads = c.num_heads,
                                            .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                                            .max_pages_per_seq = opt_.max_pages_per_seq, .max_seq_len = max_context},
                    .max_tokens = max_context};
  size_t ws = 1;
  for (t.attn.batch = 1; t.attn.batch <= decode_rows; ++t.attn.batch) ws = std::max(ws, token_decode_workspace_size(t));
  token_workspace_.resize(ws);
  check(cudaMemset(token_workspace_.data(), 0, token_workspace_.bytes()), "cudaMemset");
  moved = true;
}

// A prefill chunk of one cs sequence: its sample's stride for the chunk; the pass samples its
// queries layer by layer (attention()).
void GpuForward::begin_cs_chunk(const ForwardBatch& batch, Pass& pass) {
  const int policy = batch.policy.empty() ? 0 : batch.policy[0];  // none given: the engine's (index 0)
  if (!cs_ || !planner_->cs_params(policy)) return;
  SKIM_REQUIRE(pass.chunk && pass.seqs == 1, "cs on the GPU: a prompt's rows come as chunks of one sequence");
  bool moved = false;
  const int slot = cs_->slot_for(batch.tables[0], policy, moved, stream_);
  if (moved) drop_graphs();
  cs_->begin_chunk(slot, batch.positions[0], int(batch.tokens.size()), stream_);
  pass.cs_slot = slot;
}

// Before a decode step's graph (or `steps` of them): every cs row whose sequence has no tables yet
// gets them, from the keys before its position (the CPU builds at the first decode step too);
// the keys the steps insert are counted as indexed.
void GpuForward::build_cs_tables(std::span<PageTable* const> tables, std::span<const int32_t> positions,
                                 std::span<const int32_t> policies, uint32_t dense, int steps) {
  if (!cs_) return;
  for (size_t r = 0; r < tables.size(); ++r) {
    const int index = row_policy_of(policies, r);
    if (!planner_->cs_params(index) || dense >> index & 1u) continue;
    const int slot = cs_->slot_of(tables[r]);
    SKIM_REQUIRE(slot >= 0, "policy cs: a sequence reached decoding without a prompt run under cs on the GPU");
    if (!cs_->built(slot)) {
      std::vector<const uint16_t*> pools;
      for (int l = 0; l < w_.config.num_layers; ++l) pools.push_back(cache_.k(l));
      cs_->build(slot, positions[r], pools, tables[r]->pages, stream_);
    }
    cs_->indexed_to(slot, positions[r] + steps);  // the steps insert their keys
  }
}

void GpuForward::bench_prompts(std::span<PageTable* const> tables, std::span<const int32_t> policies) {
  for (size_t i = 0; i < tables.size(); ++i) {
    const int policy = row_policy_of(policies, i);
    if (!cs_ || !planner_->cs_params(policy)) continue;
    bool moved = false;
    const int slot = cs_->slot_for(tables[i], policy, moved, stream_);
    if (moved) drop_graphs();
    cs_->random_sample(slot, tables[i]->length, 11 + i, stream_);
  }
}

void GpuForward::attend_cs(int l, int n, const PagedDecodeArgs& base, cudaStream_t s) {
  const InputLayout in(opt_.max_rows);
  cs_->decode_layer(l, n,
                    {.q = q_.data(), .k_pool = cache_.k(l), .positions = inputs_.data() + in.positions,
                     .page_table = inputs_.data() + in.table, .max_pages_per_seq = opt_.max_pages_per_seq,
                     .row_slot = inputs_.data() + in.cs_slot},
                    s);
  TokenDecodeArgs t{.attn = base, .max_tokens = cs_->max_tokens(), .lists_per_query_head = false,
                    .token_lists = cs_->token_lists(), .token_lens = cs_->token_lens()};
  // The rows' own page tables (a token plan lists positions); the context bound. Over KV beyond
  // GPU memory the pools are pinned host memory and the kernel reads the picked rows from it
  // over PCIe, K and V of a key each (512 bytes at the 8B shape), with nothing cached: through
  // the device page cache each pick brought its whole page (16 rows), and at 512K a step of cs
  // at 0.5% took 90.6 ms that way against 41.0 ms reading rows; at 2% the picks touched more
  // pages of a head than the cache's 8192 slots (4 x H100, random keys, 2026-11-27,
  // bench/results/2026-11-27-h100-cs-host-rows/).
  t.attn.tables_per_kv_head = false;
  t.attn.page_table = inputs_.data() + in.table;
  t.attn.seq_lens = inputs_.data() + in.seq_lens;
  t.attn.head_masks = nullptr;
  t.attn.max_seq_len = pass_.max_seq_len;
  t.attn.workspace = token_workspace_.data();
  t.attn.workspace_bytes = token_workspace_.bytes();
  check(token_decode_attention(t, s), "token_decode_attention (cs)");
}

}  // namespace skim::cuda
