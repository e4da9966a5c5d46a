#include "backend/cuda/gpu_forward.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/ops.cuh"
#include "backend/cuda/art_decode_attention.cuh"
#include "backend/cuda/paged_decode_attention.cuh"
#include "backend/cuda/gpu_inputs.h"
#include "backend/cuda/paged_prefill_attention.cuh"
#include "backend/cuda/token_logprobs.cuh"
#include "kv/host_kv_budget.h"
#include "model/llama_forward.h"

namespace skim::cuda {

GpuForward::GpuForward(std::shared_ptr<const GpuWeights> weights, const KVCacheShape& shape,
                       const GpuForwardOptions& o)
    : weights_(std::move(weights)), w_(*weights_), cache_(shape, o.host_kv_slots != 0), opt_(o),
      mac_(MacShape{w_.config.num_layers, w_.config.num_heads, w_.config.num_kv_heads, w_.config.head_dim, o.max_rows,
                    o.max_pages_per_seq, shape.num_pages}),
      retro_(RetroShape{w_.config.num_layers, w_.config.num_heads, w_.config.num_kv_heads, w_.config.head_dim,
                        o.max_rows, o.max_pages_per_seq, shape.num_pages}) {
  const ModelConfig& c = w_.config;
  SKIM_REQUIRE(o.max_rows > 0 && o.max_pages_per_seq > 0, "GPU forward: invalid options");
  SKIM_REQUIRE(c.head_dim == 64 || c.head_dim == 128,
               "--device cuda: head_dim {} is not supported by the GPU attention kernel (64 or 128)",
               c.head_dim);
  SKIM_REQUIRE(shape.page_size == 16, "--device cuda: page size must be 16");
  SKIM_REQUIRE(!o.shard || (o.comm && (!o.shard->replicated() || o.kv_group)),
               "internal: a tensor-parallel GPU rank without its communicators");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreate");
  if (o.comm) o.comm->set_stream(stream_);
  if (o.kv_group) o.kv_group->set_stream(stream_);

  const size_t R = size_t(o.max_rows);
  x_.resize(R * c.hidden_size);
  y_.resize(R * c.hidden_size);
  qkv_.resize(R * (c.q_dim() + 2 * c.kv_dim()));
  o_.resize(R * c.q_dim());
  lse_.resize(R * c.num_heads);
  gate_up_.resize(R * 2 * c.intermediate_size);
  logits_.resize(R * c.vocab_size);
  if (o.shard) {
    slice_logits_.resize(R * o.shard->vocab_stride);
    gathered_logits_.resize(R * o.shard->vocab_stride * o.shard->size);
  }
  if (replicated()) {
    const size_t own = R * size_t(o.shard->q_heads) * c.head_dim;
    q_own_.resize(own);
    o16_own_.resize(own);
    gathered_q_.resize(R * c.q_dim());
  }
  h_.resize(R * c.hidden_size);
  h_rows_.resize(R * c.hidden_size);
  q_.resize(R * c.q_dim());
  o16_.resize(R * c.q_dim());
  inter_.resize(R * c.intermediate_size);
  next_.resize(R);
  sample_params_.resize(R);
  check(cudaMallocHost(reinterpret_cast<void**>(&sample_staging_), R * sizeof(SampleParams)), "cudaMallocHost");
  const size_t top = R * kMaxTopLogprobs;
  lp_top_n_.resize(R);
  lp_top_ids_.resize(top);
  lp_logprob_.resize(R);
  lp_top_values_.resize(top);
  check(cudaMallocHost(reinterpret_cast<void**>(&lp_host_ints_), (R + top) * sizeof(int32_t)), "cudaMallocHost");
  check(cudaMallocHost(reinterpret_cast<void**>(&lp_host_floats_), (R + top) * sizeof(float)), "cudaMallocHost");

  const size_t input_ints = InputLayout(o.max_rows).table + R * o.max_pages_per_seq;
  inputs_.resize(input_ints);
  check(cudaMemset(inputs_.data(), 0, inputs_.bytes()), "cudaMemset");
  check(cudaMallocHost(reinterpret_cast<void**>(&staging_), input_ints * sizeof(int32_t)), "cudaMallocHost");
  std::fill_n(staging_, input_ints, 0);

  PagedDecodeArgs a;
  a.num_heads = c.num_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.max_pages_per_seq = o.max_pages_per_seq;
  a.max_seq_len = o.max_pages_per_seq * shape.page_size;
  // The split plan, hence the workspace, depends on the batch: size it for the largest need
  // over every batch a pass may have, split for one row (the most CTAs a row: split_rows).
  size_t ws = 1;
  a.split_rows = 1;
  for (a.batch = 1; a.batch <= o.max_rows; ++a.batch) ws = std::max(ws, paged_decode_workspace_size(a));
  // MAC's one call of 2n rows, split as its n rows (gpu_forward_mac.cpp).
  for (int n = 1; n <= o.max_rows; ++n) {
    a.batch = 2 * n;
    a.split_rows = a.q_rows = n;
    ws = std::max(ws, paged_decode_workspace_size(a));
  }
  // Retro's folded call: twice the query heads a KV head (gpu_forward_retro.cpp).
  if (retro_fold_fits(2, c.num_heads / c.num_kv_heads)) {
    a.q_rows = 0;
    a.split_rows = 1;
    a.num_heads = 2 * c.num_heads;
    for (a.batch = 1; a.batch <= o.max_rows; ++a.batch) ws = std::max(ws, paged_decode_workspace_size(a));
    a.num_heads = c.num_heads;
  }
  attn_workspace_.resize(ws);
  check(cudaMemset(attn_workspace_.data(), 0, attn_workspace_.bytes()), "cudaMemset");
  // Prefill chunks too short to fill the GPU (rectification) split their keys over CTAs.
  prefill_workspace_.resize(std::max<size_t>(1, paged_prefill_workspace_size(o.max_rows, c.num_heads, c.num_kv_heads,
                                                                              c.head_dim, a.max_seq_len - 1)));
  SKIM_REQUIRE(!o.host_kv_prefetch || o.host_kv_slots != 0, "GPU forward: host_kv_prefetch without host_kv_slots");
  planner_ = std::make_unique<DecodePlanner>(o.policy, PlannerShape{c.num_layers, c.num_heads, c.num_kv_heads,
                                                                     c.head_dim, shape.page_size, o.max_rows,
                                                                     o.max_pages_per_seq, o.host_kv_prefetch});
  SKIM_REQUIRE(o.host_kv_slots >= kHostKvSlotsAuto, "GPU forward: host_kv_slots {} < {} (auto)", o.host_kv_slots,
               kHostKvSlotsAuto);
  reserve_prefetch();
  if (o.host_kv_slots != 0) {
    SKIM_REQUIRE(!o.shard, "KV beyond GPU memory: not with tensor parallelism");
    const int slots = o.host_kv_slots > 0
                          ? o.host_kv_slots
                          : HostKVSlots::most_that_fit(shape, sequence_rows(), o.max_pages_per_seq, o.host_kv_prefetch);
    host_kv_ = std::make_unique<HostKVSlots>(shape, slots, sequence_rows(), o.max_pages_per_seq, o.host_kv_prefetch);
  }
  bool moved = false;
  reserve_art(moved);
  reserve_mac(moved);
  reserve_retro(moved);
  reserve_cs(0, moved);
  check(cudaDeviceSynchronize(), "GPU forward set-up");
}

GpuForward::~GpuForward() {
  drop_graphs();
  if (staging_) cudaFreeHost(staging_);
  if (next_host_) cudaFreeHost(next_host_);
  if (sample_staging_) cudaFreeHost(sample_staging_);
  if (lp_host_ints_) cudaFreeHost(lp_host_ints_);
  if (lp_host_floats_) cudaFreeHost(lp_host_floats_);
  destroy_prefetch();
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (side_stream_) cudaStreamDestroy(side_stream_);
  if (stream_) cudaStreamDestroy(stream_);
}

void GpuForward::drop_graphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

int GpuForward::acquire_policy(const std::string& policy) {
  // Between steps (a sequence opens): nothing of ours may run while buffers move.
  check(cudaStreamSynchronize(stream_), "forward pass");
  bool moved = false;
  const int index = planner_->acquire(policy, moved);
  reserve_art(moved);
  reserve_mac(moved);
  reserve_retro(moved);
  reserve_cs(index, moved);
  if (moved) drop_graphs();  // they point at the old plan buffers, or ran another policy at an index
  return index;
}

// ART's workspace, the first time a policy with art is registered: sized for every batch and
// the smallest round (the most rounds per list), zero-filled once (the kernel leaves it so).
void GpuForward::reserve_art(bool& moved) {
  if (art_workspace_.size() > 0 || !planner_->has_art()) return;
  const ModelConfig& c = w_.config;
  ArtDecodeArgs a;
  a.attn = PagedDecodeArgs{.num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                           .max_pages_per_seq = opt_.max_pages_per_seq,
                           .max_seq_len = opt_.max_pages_per_seq * cache_.shape().page_size,
                           .tables_per_kv_head = true};
  a.art.round_pages = kArtBlockPages;
  size_t ws = 0;
  for (a.attn.batch = 1; a.attn.batch <= opt_.max_rows; ++a.attn.batch) ws = std::max(ws, art_decode_workspace_size(a));
  SKIM_REQUIRE(ws > 0, "GPU forward: ART does not run this model's attention shape ({} query heads per KV head, "
               "head_dim {}; it needs at most 8 and 64 or 128)", c.num_heads / c.num_kv_heads, c.head_dim);
  art_workspace_.resize(ws);
  check(cudaMemset(art_workspace_.data(), 0, art_workspace_.bytes()), "cudaMemset");
  art_stats_.resize(1);
  check(cudaMemset(art_stats_.data(), 0, art_stats_.bytes()), "cudaMemset");
  moved = true;
}

ArtDecodeStats GpuForward::art_stats() const {
  ArtDecodeStats s;
  if (art_stats_.size() == 0) return s;
  check(cudaStreamSynchronize(stream_), "forward pass");
  check(cudaMemcpy(&s, art_stats_.data(), sizeof s, cudaMemcpyDeviceToHost), "cudaMemcpy (ART stats)");
  return s;
}

double GpuForward::art_bytes_read() const {  // K and V of the pages ART read, one KV head each
  return double(art_stats().pages_read) * cache_.shape().page_size * 2.0 * w_.config.head_dim * sizeof(uint16_t);
}

void GpuForward::release_policy(int index) { planner_->release(index); }

uint32_t GpuForward::stage(std::span<PageTable* const> tables, std::span<const int32_t> tokens,
                           std::span<const int32_t> positions, std::span<const int> logits_rows,
                           std::span<const int32_t> policies, std::span<const int32_t> retro_steps,
                           bool one_table) {
  const int n = int(tokens.size());
  SKIM_REQUIRE(policies.empty() || policies.size() == size_t(n), "GPU forward: {} policy indices for {} rows",
               policies.size(), n);
  SKIM_REQUIRE(retro_steps.empty() || retro_steps.size() == size_t(n), "GPU forward: {} retro steps for {} rows",
               retro_steps.size(), n);
  const InputLayout in(opt_.max_rows);
  const int maxp = opt_.max_pages_per_seq, ps = cache_.shape().page_size;
  uint32_t present = 0;
  for (int r = 0; r < n; ++r) {
    const PageTable& t = *tables[size_t(r)];
    SKIM_REQUIRE(int(t.pages.size()) <= maxp, "GPU forward: a sequence holds {} pages, more than {}",
                 t.pages.size(), maxp);
    SKIM_REQUIRE(positions[r] >= 0 && positions[r] / ps < int(t.pages.size()),
                 "GPU forward: position {} is not reserved in its page table", positions[r]);
    staging_[in.tokens + r] = tokens[r];
    staging_[in.positions + r] = positions[r];
    staging_[in.seq_lens + r] = positions[r] + 1;
    const int32_t policy = row_policy_of(policies, size_t(r));
    SKIM_REQUIRE(policy >= 0 && policy < DecodePlanner::kMaxPolicies, "GPU forward: policy index {}", policy);
    staging_[in.policy + r] = policy;
    present |= 1u << policy;
    bool moved = false;  // a new slot may grow MAC's or Retro's buffers: the graphs then point at freed memory
    staging_[in.mac_slot + r] = planner_->mac_rule(policy) ? mac_.slot_for(&t, policy, moved, stream_) : -1;
    // RetroAttention: the rows of a sequence come together, its newest (largest step) last.
    const bool retro = planner_->retro_rule(policy) && !retro_steps.empty();
    const bool newest = !retro_past_row(tables, size_t(r));
    staging_[in.retro_slot + r] = retro ? retro_.slot_for(&t, policy, moved, stream_) : -1;
    staging_[in.retro_step + r] = retro_steps.empty() ? 0 : retro_steps[size_t(r)];
    staging_[in.plan_policy + r] = retro && !newest ? InputLayout::kNoPlan : policy;  // a past row: its newest's plan
    staging_[in.cs_slot + r] = cs_ && planner_->cs_params(policy) ? cs_->slot_for(&t, policy, moved, stream_) : -1;
    if (moved) drop_graphs();
    if (!one_table || r == 0) std::copy(t.pages.begin(), t.pages.end(), staging_ + in.table + size_t(r) * maxp);
  }
  for (int r = n - 1; r >= 0; --r)  // each row's sequence's last row
    staging_[in.newest_row + r] =
        retro_past_row(tables, size_t(r)) ? staging_[in.newest_row + r + 1] : r;
  for (size_t i = 0; i < logits_rows.size(); ++i) staging_[in.rows + i] = logits_rows[i];
  staged_runs_ = 0;  // the runs of rows of one sequence
  for (int r = 0; r < n; ++r)
    if (r == 0 || tables[size_t(r)] != tables[size_t(r - 1)]) staging_[in.seq_rows + staged_runs_++] = r;
  staging_[in.seq_rows + staged_runs_] = n;
  // Rows [0, n) of the page table suffice: the kernels read no further (row 0's alone with one_table).
  const size_t count = in.table + size_t(one_table ? 1 : n) * maxp;
  check(cudaMemcpyAsync(inputs_.data(), staging_, count * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync (step inputs)");
  return present;
}

double GpuForward::decode_bytes_read(int length, int index) const {
  double bytes = 0;
  for (int l = 0; l < w_.config.num_layers; ++l) bytes += planner_->bytes_read(index, l, length);
  return bytes;
}

void GpuForward::enqueue(int n, int logits_n, const Pass& pass, bool advance) {
  pass_ = pass;
  pass_.prefetch = prefetches(pass);
  mac_index_made_ = false;
  if (host_kv_ && pass.decode) {  // the step's counter and written pages, before layer 0
    const InputLayout in(opt_.max_rows);
    host_kv_->begin_step(n, inputs_.data() + in.positions, inputs_.data() + in.table, stream_);
  }
  llama_forward(*this, w_.config, n, logits_n);
  if (advance && logits_n > 0) {
    const InputLayout in(opt_.max_rows);
    DecodeState st{inputs_.data() + in.tokens, inputs_.data() + in.positions, inputs_.data() + in.seq_lens};
    argmax(logits_.data(), logits_n, w_.config.vocab_size, next_.data(), &st, stream_);
  }
}

void GpuForward::embed(int n) {
  const int32_t* tokens = inputs_.data() + InputLayout(opt_.max_rows).tokens;
  const int H = w_.config.hidden_size;
  if (!opt_.shard) {
    cuda::embed(w_.embed.data.data(), tokens, x_.data(), n, H, stream_);
    return;
  }
  // The rank holding a token's row writes it, the others zeros; the sum is the row.
  embed_vocab_slice(w_.embed.data.data(), tokens, x_.data(), n, H, opt_.shard->vocab_begin, opt_.shard->vocab,
                    stream_);
  opt_.comm->all_reduce_sum(x_.data(), size_t(n) * H);
}

void GpuForward::warm_collectives() {
  if (!opt_.comm) return;
  const size_t rows = size_t(opt_.max_rows);
  fill_f32(y_.data(), y_.size(), 0.0f, stream_);
  fill_f32(slice_logits_.data(), slice_logits_.size(), 0.0f, stream_);
  for (size_t n : {size_t(1), rows}) {  // the small and the large message sizes a pass sends
    opt_.comm->all_reduce_sum(y_.data(), n * w_.config.hidden_size);
    opt_.comm->all_gather(slice_logits_.data(), n * opt_.shard->vocab_stride, gathered_logits_.data());
    if (replicated())
      opt_.kv_group->all_gather(reinterpret_cast<const float*>(q_own_.data()),
                                n * opt_.shard->q_heads * w_.config.head_dim / 2,
                                reinterpret_cast<float*>(gathered_q_.data()));
  }
  check(cudaStreamSynchronize(stream_), "warming NCCL up");
}

void GpuForward::all_reduce(int n) {
  if (opt_.comm) opt_.comm->all_reduce_sum(y_.data(), size_t(n) * w_.config.hidden_size);
}

void GpuForward::add_rmsnorm(int n, int layer, NormWeight weight, bool residual) {
  const ModelConfig& c = w_.config;
  const auto& w = weight == NormWeight::final ? w_.final_norm
                  : weight == NormWeight::attn ? w_.layers[size_t(layer)].attn_norm
                                               : w_.layers[size_t(layer)].mlp_norm;
  if (weight == NormWeight::mlp) wait_prefetch_read();  // x changes: the next layer's guess has read it
  cuda::add_rmsnorm(x_.data(), residual ? y_.data() : nullptr, w.data(), h_.data(), n, c.hidden_size,
                    c.rms_norm_eps, stream_);
  if (weight == NormWeight::attn) fork_prefetch(n, layer);  // x is layer's input: guess the next layer's pages
}

void GpuForward::linear(int n, int layer, Projection p) {
  const GpuLayer& L = w_.layers[size_t(layer)];
  switch (p) {
    case Projection::qkv: gemm_.linear(h_.data(), L.wqkv, qkv_.data(), n, stream_); return;  // bias: qkv_rope_append
    case Projection::o: gemm_.linear(replicated() ? o16_own_.data() : o16_.data(), L.wo, y_.data(), n, stream_); return;
    case Projection::gate_up: gemm_.linear(h_.data(), L.w_gate_up, gate_up_.data(), n, stream_); return;
    case Projection::down: gemm_.linear(inter_.data(), L.w_down, y_.data(), n, stream_); return;
  }
}

void GpuForward::qkv_rope_append(int n, int layer) {
  const ModelConfig& c = w_.config;
  const GpuLayer& L = w_.layers[size_t(layer)];
  const InputLayout in(opt_.max_rows);
  QkvRopeAppendArgs qa;
  qa.qkv = qkv_.data();
  qa.bias = L.qkv_bias.size() ? L.qkv_bias.data() : nullptr;
  qa.q_norm = L.q_norm.size() ? L.q_norm.data() : nullptr;
  qa.k_norm = L.k_norm.size() ? L.k_norm.data() : nullptr;
  qa.eps = c.rms_norm_eps;
  qa.inv_freq = w_.inv_freq.data();
  qa.positions = inputs_.data() + in.positions;
  qa.page_table = inputs_.data() + in.table;
  qa.max_pages_per_seq = pass_.one_table ? 0 : opt_.max_pages_per_seq;  // 0: every row reads row 0's table
  qa.n = n;
  qa.num_heads = replicated() ? opt_.shard->q_heads : c.num_heads;  // the heads its wqkv projects
  qa.num_kv_heads = c.num_kv_heads;
  qa.head_dim = c.head_dim;
  qa.page_size = cache_.shape().page_size;
  qa.q = replicated() ? q_own_.data() : q_.data();
  qa.q_pre = !mac_.active() ? nullptr : replicated() ? q_pre_own_.data() : q_pre_.data();
  qa.k_pool = pass_k(layer);
  qa.v_pool = pass_v(layer);
  cuda::qkv_rope_append(qa, stream_);
  // A kernel of its own (under PDL it overlaps the append's tail): recomputing the digests inside
  // qkv_rope_append's KV CTAs for decode steps was 0.1-0.2% slower end to end (8B shape, 8K and
  // 32K, b1 and b8, H100, 2026-11-26): those CTAs then wait on the page's earlier slots.
  page_digest(qa.k_pool, cache_.kmin(layer), cache_.kmax(layer), qa.positions, qa.page_table,
              qa.max_pages_per_seq, n, c.num_kv_heads, c.head_dim, qa.page_size, stream_);
  if (replicated()) {  // the group's queries from the GPUs that hold its KV head
    gather_group_rows(q_own_.data(), q_.data(), n);
    if (qa.q_pre) gather_group_rows(q_pre_own_.data(), q_pre_.data(), n);
  }
}

void GpuForward::gather_group_rows(const uint16_t* mine, uint16_t* group, int n) {
  const int ranks = opt_.shard->kv_group_ranks;
  const size_t own = size_t(opt_.shard->q_heads) * w_.config.head_dim, count = size_t(n) * own;
  // bf16 pairs travel as floats: a gather moves bits, it adds nothing (own is even: head_dim is).
  opt_.kv_group->all_gather(reinterpret_cast<const float*>(mine), count / 2, reinterpret_cast<float*>(gathered_q_.data()));
  for (int g = 0; g < ranks; ++g)
    check(cudaMemcpy2DAsync(group + size_t(g) * own, size_t(ranks) * own * sizeof(uint16_t),
                            gathered_q_.data() + size_t(g) * count, own * sizeof(uint16_t), own * sizeof(uint16_t),
                            size_t(n), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpy2DAsync (group queries)");
}

void GpuForward::attention(int n, int layer) {
  const ModelConfig& c = w_.config;
  const InputLayout in(opt_.max_rows);
  const int32_t* table = inputs_.data() + in.table;
  if (pass_.chunk) {
    PagedPrefillArgs pa;
    pa.n = n;
    pa.num_heads = c.num_heads;
    pa.num_kv_heads = c.num_kv_heads;
    pa.head_dim = c.head_dim;
    pa.max_position = pass_.max_seq_len - 1;
    pa.scale = 1.0f / std::sqrt(float(c.head_dim));
    pa.q = q_.data();
    pa.k_pool = pass_k(layer);
    pa.v_pool = pass_v(layer);
    pa.page_table = table;  // row 0's: every row's is the same
    pa.positions = inputs_.data() + in.positions;
    if (pass_.seqs > 1) {  // each run's table is its first row's
      pa.num_seqs = pass_.seqs;
      pa.seq_rows = inputs_.data() + in.seq_rows;
      pa.table_stride = opt_.max_pages_per_seq;
    }
    pa.o = o_.data();
    pa.lse = lse_.data();
    pa.workspace = prefill_workspace_.data();
    pa.workspace_bytes = prefill_workspace_.bytes();
    check(paged_prefill_attention(pa, stream_), "paged_prefill_attention");
    if (pass_.mac_first >= 0) fill_mac_rings(layer, n, stream_);
    if (pass_.cs_slot >= 0)  // a cs prompt: its queries sampled (or, after its tables exist, its keys inserted)
      cs_->prefill_layer(pass_.cs_slot, layer, n,
                         {.q = q_.data(), .k_pool = pass_k(layer), .positions = pa.positions, .page_table = table,
                          .max_pages_per_seq = opt_.max_pages_per_seq, .row_slot = inputs_.data() + in.cs_slot},
                         stream_);
  } else {
    o_in_bf16_ = false;
    attend_decode(layer, n, pass_.max_seq_len, table, inputs_.data() + in.seq_lens, stream_);
    join_prefetch(layer, stream_);  // a graph's branches all end inside it (read_through_cache joined it already)
  }
  // The o projection's input, unless the step's last attention kernel wrote it (o_in_bf16_).
  if (pass_.chunk || !o_in_bf16_) to_bf16(o_.data(), o16_.data(), size_t(n) * c.q_dim(), stream_);
  if (replicated()) {  // the group's heads were attended: its own are the o projection's input
    const size_t own = size_t(opt_.shard->q_heads) * c.head_dim;
    check(cudaMemcpy2DAsync(o16_own_.data(), own * sizeof(uint16_t),
                            o16_.data() + size_t(opt_.shard->own_head_offset()) * c.head_dim,
                            size_t(c.q_dim()) * sizeof(uint16_t), own * sizeof(uint16_t), size_t(n),
                            cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpy2DAsync (own heads)");
  }
}

void GpuForward::silu_mul(int n) {
  cuda::silu_mul(gate_up_.data(), inter_.data(), n, w_.config.intermediate_size, stream_);
}

void GpuForward::logits(int n_logits) {
  const uint16_t* head_in = h_.data();
  if (pass_.gather) {
    gather_rows(h_.data(), inputs_.data() + InputLayout(opt_.max_rows).rows, h_rows_.data(), n_logits,
                w_.config.hidden_size, stream_);
    head_in = h_rows_.data();
  }
  if (!opt_.shard) {
    gemm_.linear(head_in, w_.output(), logits_.data(), n_logits, stream_);
    return;
  }
  // This rank's vocabulary slice (its LM head padded to the stride), every rank's gathered, then
  // laid side by side: the whole logits on every rank, so every rank samples the same tokens.
  const TensorShard& s = *opt_.shard;
  gemm_.linear(head_in, w_.output(), slice_logits_.data(), n_logits, stream_);
  opt_.comm->all_gather(slice_logits_.data(), size_t(n_logits) * s.vocab_stride, gathered_logits_.data());
  unpack_vocab_slices(gathered_logits_.data(), s.size, n_logits, s.vocab_stride, w_.config.vocab_size,
                      logits_.data(), stream_);
}

void GpuForward::attend_decode(int l, int n, int max_seq_len, const int32_t* table, const int32_t* seq_lens,
                               cudaStream_t s) {
  const ModelConfig& c = w_.config;
  // Decode steps attend through the policy's plan; mixed batches (prefill rows among them)
  // over every visible key, as prefill always does.
  DevicePlan plan{false, table, seq_lens, max_seq_len};
  if (pass_.decode)
    plan = planner_->plan(PlanInput{l, n, max_seq_len, q_.data(), cache_.kmin(l), cache_.kmax(l), table, seq_lens,
                                    inputs_.data() + InputLayout(opt_.max_rows).plan_policy, pass_.policies,
                                    pass_.dense_policies},
                          s);
  PagedDecodeArgs a{.batch = n, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads,
                    .head_dim = c.head_dim, .max_pages_per_seq = opt_.max_pages_per_seq,
                    .max_seq_len = plan.max_seq_len, .scale = 1.0f / std::sqrt(float(c.head_dim)),
                    .tables_per_kv_head = plan.per_kv_head, .q = q_.data(), .k_pool = cache_.k(l),
                    .v_pool = cache_.v(l), .page_table = plan.table, .seq_lens = plan.lens,
                    .head_masks = plan.head_masks, .o = o_.data(),
                    .lse = lse_.data(), .workspace = attn_workspace_.data(),
                    .workspace_bytes = attn_workspace_.bytes()};
  if (plan.cs) {  // the step's first rows run cs, indexed here: their token plan over their own pages
    const int cs_rows = pass_.cs_rows;
    if (cs_rows == n || host_kv_) {
      attend_cs(l, cs_rows, a.rows(0, cs_rows), s);
      if (cs_rows == n) return;
    } else {
      // Beside the others' page plan, a branch of the step's graph: cs's chain of small kernels
      // (a part of the machine each) runs while the page kernel reads. One after the other, a
      // batch of 8 mixing cs, dense and quest took 2 ms more than its parts (H100, 2026-11-27).
      check(cudaEventRecord(fork_, s), "cudaEventRecord");
      check(cudaStreamWaitEvent(side_stream_, fork_), "cudaStreamWaitEvent");
      attend_cs(l, cs_rows, a.rows(0, cs_rows), side_stream_);
      check(cudaEventRecord(join_, side_stream_), "cudaEventRecord");
      attend_pages(l, n - cs_rows, plan, a.rows(cs_rows, n), s);  // cs runs with no MAC, retro or ART
      check(cudaStreamWaitEvent(s, join_), "cudaStreamWaitEvent");
      return;
    }
    a = a.rows(cs_rows, n);  // the others' plan, as below
    n -= cs_rows;
  }
  attend_pages(l, n, plan, a, s);
}

// The page plan's rows: through the device page cache over host KV, then by the plan's kernels.
// MAC's and Retro's stages map the lists they make from the plan (its host page ids) themselves.
void GpuForward::attend_pages(int l, int n, const DevicePlan& plan, PagedDecodeArgs a, cudaStream_t s) {
  if (plan.mac_rules) {  // some row runs MAC: its lists cut at its prefix end, merged with its rings
    attend_mac(l, n, plan, a, s);
    return;
  }
  if (plan.retro_rules) {  // some row runs RetroAttention: past rows read what they have not seen
    attend_retro(l, n, plan, a, s);
    return;
  }
  read_through_cache(l, n, plan, a, s);
  if (!plan.art_rules) {
    a.split_rows = pass_.split_rows;
    if (a.o == o_.data()) a.o_bf16 = o16_from_attention();  // every row's output: straight to bf16
    check(paged_decode_attention(a, s), "paged_decode_attention");
    return;
  }
  if (a.o == o_.data()) a.o_bf16 = o16_from_attention();  // as above: no conversion pass after
  run_art(a, plan, s);  // ART over host KV reads its lists' pages through the cache too: all copied first
}

// Over host KV, lists per (row, KV head) of a selecting plan (rows' own tables, a dense layer's
// plan, read the host pools directly): mapped onto the device cache, the misses copied, `a`
// reading the slots.
void GpuForward::read_through_cache(int l, int n, const DevicePlan& plan, PagedDecodeArgs& a, cudaStream_t s) {
  if (!host_kv_ || !plan.per_kv_head) return;
  join_prefetch(l, s);  // the pages copied ahead into this layer's cache, and its state
  host_kv_->map_layer(l, n, a.page_table, a.seq_lens, cache_, s);
  host_kv_->read_slots(l, a);
}

// Some row runs ART: every row goes through its kernel, each by its policy's rule (a row
// without art reads its whole list, as paged_decode_attention would).
void GpuForward::run_art(const PagedDecodeArgs& a, const DevicePlan& plan, cudaStream_t s, const ArtRowRule* rules,
                         const uint32_t* heads_listed) {
  ArtDecodeArgs art{.attn = a, .art = {}, .stats = art_stats_.data(),
                    .row_policy = inputs_.data() + InputLayout(opt_.max_rows).policy,
                    .rules = rules ? rules : plan.art_rules, .heads_listed = heads_listed};
  art.art.round_pages = plan.art_round_pages;
  art.art.max_warps = plan.art_max_warps;
  art.attn.workspace = art_workspace_.data();
  art.attn.workspace_bytes = art_workspace_.bytes();
  art.art.lag_rounds = art_decode_lag(art);
  SKIM_REQUIRE(art.art.lag_rounds >= 0, "GPU forward: ART cannot run this step's shape");
  check(art_decode_attention(art, s), "art_decode_attention");
}

// The host's part of decode_kv_bytes_read for a decode step of these rows at positions + ahead.
void GpuForward::count_decode_bytes(std::span<PageTable* const> tables, std::span<const int32_t> policies,
                                    std::span<const int32_t> positions, int ahead, uint32_t dense) {
  const size_t n = tables.size();
  for (size_t r = 0; r < n; ++r) {
    // A RetroAttention past row reads among its newest row's pages (counted there) and its
    // supplements (counted on the device).
    if (retro_past_row(tables, r)) continue;
    const int index = row_policy_of(policies, r), length = positions[r] + ahead + 1;
    for (int l = 0; l < w_.config.num_layers; ++l)
      decode_bytes_total_ += dense >> index & 1u ? planner_->dense_bytes(length) : planner_->host_bytes(index, l, length);
  }
}

int GpuForward::bucket(int max_seq_len) const {
  const int cap = opt_.max_pages_per_seq * cache_.shape().page_size;
  int b = 256;
  while (b < max_seq_len) b *= 2;
  return std::min(b, cap);
}

uint32_t GpuForward::dense_policies(std::span<PageTable* const> tables, std::span<const int32_t> policies,
                                    std::span<const int32_t> positions) {
  // Over host KV dense rows read the host pools whole: the fallback would cost, never save.
  if (!opt_.dense_fallback || host_kv_) return 0;
  std::vector<int32_t>& lengths = fallback_lengths_;  // reused: no allocation per step
  lengths.assign(positions.begin(), positions.end());
  for (int32_t& l : lengths) l += 1;
  uint32_t dense = planner_->dense_fallback(policies, lengths);
  // cs keeps its tables current by inserting each step's keys: a policy with a sequence whose
  // tables exist stays on cs. A sequence that falls back has none yet; its first cs step builds
  // them from every key so far (build_cs_tables).
  for (size_t r = 0; dense && cs_ && r < tables.size(); ++r) {
    const int index = row_policy_of(policies, r);
    if (!planner_->cs_params(index) || !(dense >> index & 1u)) continue;  // cs_params: null for index < 0
    const int slot = cs_->slot_of(tables[r]);
    if (slot >= 0 && cs_->built(slot)) dense &= ~(1u << index);
  }
  for (size_t r = 0; dense && r < lengths.size(); ++r) {
    const int index = row_policy_of(policies, r);
    dense_fallback_rows_ += index >= 0 && (dense >> index & 1u);  // a negative index: no policy's row
  }
  return dense;
}

// The rows a decode step's page kernel plans its split for (Pass::split_rows): the lists of rows
// [first, n) summed in units of the longest, rounded up (0: as many as the rows: the lists are
// alike, as in a batch of one policy at one length). A RetroAttention past row (followed by a row
// of its sequence) reads only its supplement, a few pages: it counts nothing, so the newest rows
// keep the CTAs they would have alone (at w = 2 and batch 1 the newest row had half of them).
int GpuForward::split_rows(std::span<PageTable* const> tables, std::span<const int32_t> policies,
                           std::span<const int32_t> positions, int first, uint32_t dense) {
  std::vector<int64_t>& tokens = split_tokens_;  // reused: no allocation per step
  tokens.clear();
  for (size_t r = size_t(first); r < positions.size(); ++r) {
    const int index = row_policy_of(policies, r), length = positions[r] + 1;
    const bool past = retro_past_row(tables, r);
    tokens.push_back(past || index < 0 ? 0 : dense >> index & 1u ? length : planner_->list_tokens(index, length));
  }
  return split_rows_for(tokens);
}

cudaGraphExec_t GpuForward::graph(int n, int max_seq_len, bool advance, uint32_t policies, uint32_t dense_policies,
                                  int logits_n, int cs_rows, int split) {
  const int b = bucket(max_seq_len);
  // logits of every row in order, or of logits_n staged rows (RetroAttention's newest rows)
  const bool gather = logits_n >= 0;
  auto key = std::make_tuple(n, b, advance, policies, dense_policies, logits_n, cs_rows, split);
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second;
  cudaGraph_t g = nullptr;
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    enqueue(n, gather ? logits_n : n,
            Pass{.max_seq_len = b, .gather = gather, .chunk = false, .decode = true, .policies = policies,
                 .dense_policies = dense_policies, .cs_rows = cs_rows, .split_rows = split},
            advance);
  } catch (...) {  // end the capture, or this thread's later CUDA calls fail
    if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  // Kernel nodes keep the priority of the stream they were captured on: the host KV prefetch's
  // branches run at the highest (gpu_forward_prefetch.cpp), the rest at the default.
  check(cudaGraphInstantiate(&exec, g, opt_.host_kv_prefetch ? cudaGraphInstantiateFlagUseNodePriority : 0),
        "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  graphs_.emplace(key, exec);
  return exec;
}

void GpuForward::require_rows(const ForwardBatch& batch) const {
  const int n = int(batch.tokens.size());
  SKIM_REQUIRE(n > 0 && n <= opt_.max_rows, "GPU forward: {} rows, at most {} per pass", n, opt_.max_rows);
  for (int t : batch.tokens)
    SKIM_REQUIRE(t >= 0 && t < w_.config.vocab_size, "token id {} out of range [0, {})", t, w_.config.vocab_size);
  for (int r : batch.logits_rows)
    SKIM_REQUIRE(r >= 0 && r < n, "forward: logits row {} outside the batch of {}", r, n);
}

std::vector<bool> GpuForward::cs_marks(std::span<const int32_t> policies, size_t n, uint32_t dense) const {
  std::vector<bool> cs(n);
  for (size_t r = 0; cs_ && r < n; ++r) {
    const int index = row_policy_of(policies, r);
    cs[r] = planner_->cs_params(index) != nullptr && !(dense >> index & 1u);  // not falling back to dense
  }
  return cs;
}

int GpuForward::cs_rows_first(const ForwardBatch& batch, uint32_t dense, ForwardBatch& ordered,
                              bool& reordered) const {
  return rows_first(batch, cs_marks(batch.policy, batch.tokens.size(), dense), ordered, reordered);
}

int GpuForward::launch(const ForwardBatch& given) {
  const int n = int(given.tokens.size());
  require_rows(given);
  // A decode step's cs rows go first (its cs kernels and the others' plan then take row ranges);
  // its logits rows follow their rows, so the logits come back in the order asked.
  const uint32_t dense = given.decode ? dense_policies(given.tables, given.policy, given.positions) : 0;
  ForwardBatch ordered;
  bool reordered = false;
  const int cs_rows = given.decode && cs_ ? cs_rows_first(given, dense, ordered, reordered) : 0;
  const ForwardBatch& batch = reordered ? ordered : given;
  const uint32_t policies =
      stage(batch.tables, batch.tokens, batch.positions, batch.logits_rows, batch.policy, batch.retro_step);

  const int max_len = 1 + *std::max_element(batch.positions.begin(), batch.positions.end());
  if (batch.decode) count_decode_bytes(batch.tables, batch.policy, batch.positions, 0, dense);
  const int nl = int(batch.logits_rows.size());
  bool all_rows = nl == n;
  for (int i = 0; all_rows && i < nl; ++i) all_rows = batch.logits_rows[size_t(i)] == i;
  // A prefill chunk: rows at consecutive positions of one sequence, or of several one after
  // another (each sequence in one run), none running MAC (its rings fill from one chunk).
  bool chunk = !batch.decode;
  for (int r = 1; chunk && r < n; ++r)
    chunk = batch.tables[size_t(r)] == batch.tables[size_t(r - 1)]
                ? batch.positions[size_t(r)] == batch.positions[size_t(r - 1)] + 1
                : std::find(batch.tables.begin(), batch.tables.begin() + r, batch.tables[size_t(r)]) ==
                      batch.tables.begin() + r;
  for (int r = 0; chunk && staged_runs_ > 1 && r < n; ++r)
    chunk = batch.policy.empty() || !planner_->mac_rule(batch.policy[size_t(r)]);
  if (batch.decode) {  // one graph per step, the logits rows (all, or the newest of each sequence) as data
    build_cs_tables(batch.tables, batch.positions, batch.policy, dense);  // a cs sequence's first step: its tables, outside the graph
    const int split = split_rows(batch.tables, batch.policy, batch.positions, cs_rows, dense);
    check(cudaGraphLaunch(graph(n, max_len, false, policies, dense, all_rows ? -1 : nl, cs_rows, split), stream_),
          "cudaGraphLaunch");
    return nl;
  }
  Pass pass{.max_seq_len = max_len, .gather = true, .chunk = chunk, .seqs = staged_runs_, .decode = batch.decode,
            .policies = policies};
  const MacRowRule* mac = chunk && !batch.policy.empty() ? planner_->mac_rule(batch.policy[0]) : nullptr;
  if (mac) {  // the chunk's last ring's worth of rows fill the sequence's rings
    pass.mac_first = std::max(0, n - mac->window);
    pass.mac_band = mac->band;
  }
  begin_cs_chunk(batch, pass);  // a cs sequence's chunk: its queries sampled for the tables
  enqueue(n, nl, pass, false);
  if (host_kv_) host_kv_->invalidate(stream_);  // the chunk wrote pages no map saw
  return nl;
}

void GpuForward::run(const ForwardBatch& batch, AttentionPolicy&, std::vector<float>& logits) {
  const int nl = launch(batch);
  logits.resize(size_t(nl) * w_.config.vocab_size);
  if (nl > 0)
    check(cudaMemcpyAsync(logits.data(), logits_.data(), logits.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (logits)");
  if (host_kv_) host_kv_->enqueue_refused_copy(stream_);
  check(cudaStreamSynchronize(stream_), "forward pass");
  check_host_kv();
}

// A decode step over host KV whose selection needed more distinct pages of a KV head than the
// device cache has slots ran on unmapped lists: refused here, after it (the flag came back with
// the step's outputs: HostKVSlots::enqueue_refused_copy before the caller's wait).
void GpuForward::check_host_kv() {
  if (host_kv_ && host_kv_->refused(stream_))
    fail("KV beyond GPU memory: a decode step selected more distinct pages of one KV head than the device cache's "
         "{} slots per layer and KV head; its output is invalid (raise the slots, or select fewer pages)",
         host_kv_->slots());
}

void GpuForward::copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) {
  const KVCacheShape& sh = cache_.shape();
  const size_t page = size_t(sh.num_kv_heads) * sh.page_size * sh.head_dim, digest = size_t(sh.num_kv_heads) * sh.head_dim;
  auto copy = [&](uint16_t* base, size_t elems, int32_t src, int32_t dst) {
    check(cudaMemcpyAsync(base + size_t(dst) * elems, base + size_t(src) * elems, elems * sizeof(uint16_t),
                          cudaMemcpyDefault, stream_),  // device memory, or mapped host memory (host KV)
          "cudaMemcpyAsync (page copy)");
  };
  for (int l = 0; l < sh.num_layers; ++l)
    for (size_t i = 0; i < from.size(); ++i) {
      copy(cache_.k(l), page, from[i], to[i]);
      copy(cache_.v(l), page, from[i], to[i]);
      copy(cache_.kmin(l), digest, from[i], to[i]);
      copy(cache_.kmax(l), digest, from[i], to[i]);
    }
  if (host_kv_) host_kv_->invalidate(stream_);  // the copies wrote pages no map saw
}

std::vector<int32_t> GpuForward::run_sampled(const ForwardBatch& batch, AttentionPolicy&,
                                             std::span<const SampleParams> params,
                                             std::span<const int32_t> top_logprobs,
                                             std::vector<TokenLogprob>* logprobs) {
  SKIM_REQUIRE(params.size() == batch.logits_rows.size(), "GPU forward: {} sampling parameters for {} logits rows",
               params.size(), batch.logits_rows.size());
  const bool want = logprobs && std::any_of(top_logprobs.begin(), top_logprobs.end(), [](int32_t n) { return n >= 0; });
  SKIM_REQUIRE(!want || top_logprobs.size() == params.size(), "GPU forward: {} logprobs settings for {} rows",
               top_logprobs.size(), params.size());
  const int nl = launch(batch);
  std::copy(params.begin(), params.end(), sample_staging_);
  check(cudaMemcpyAsync(sample_params_.data(), sample_staging_, nl * sizeof(SampleParams), cudaMemcpyHostToDevice,
                        stream_),
        "cudaMemcpyAsync (sampling parameters)");
  sample(logits_.data(), nl, w_.config.vocab_size, sample_params_.data(), next_.data(), stream_);
  if (want) enqueue_logprobs(nl, top_logprobs);
  std::vector<int32_t> tokens(static_cast<size_t>(nl));
  check(cudaMemcpyAsync(tokens.data(), next_.data(), nl * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync (tokens)");
  if (host_kv_) host_kv_->enqueue_refused_copy(stream_);
  check(cudaStreamSynchronize(stream_), "forward pass");
  check_host_kv();
  if (want) *logprobs = collect_logprobs(tokens, top_logprobs);
  return tokens;
}

// The sampled tokens' log-probabilities (token_logprobs) of the `nl` logits rows, copied back
// into the pinned buffers on the stream.
void GpuForward::enqueue_logprobs(int nl, std::span<const int32_t> top_n) {
  const size_t R = size_t(opt_.max_rows), top = size_t(nl) * kMaxTopLogprobs;
  for (int i = 0; i < nl; ++i)
    SKIM_REQUIRE(top_n[size_t(i)] <= kMaxTopLogprobs, "logprobs: {} alternatives, at most {}", top_n[size_t(i)],
                 kMaxTopLogprobs);
  std::copy(top_n.begin(), top_n.end(), lp_host_ints_);
  check(cudaMemcpyAsync(lp_top_n_.data(), lp_host_ints_, nl * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync (logprobs settings)");
  check(token_logprobs({.rows = nl, .vocab = w_.config.vocab_size, .logits = logits_.data(), .tokens = next_.data(),
                        .top_n = lp_top_n_.data(), .logprob = lp_logprob_.data(), .top_ids = lp_top_ids_.data(),
                        .top_logprobs = lp_top_values_.data()},
                       stream_),
        "token_logprobs");
  auto back = [&](void* host, const void* dev, size_t bytes) {
    check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (logprobs)");
  };
  back(lp_host_floats_, lp_logprob_.data(), nl * sizeof(float));
  back(lp_host_floats_ + R, lp_top_values_.data(), top * sizeof(float));
  back(lp_host_ints_ + R, lp_top_ids_.data(), top * sizeof(int32_t));
}

std::vector<TokenLogprob> GpuForward::collect_logprobs(std::span<const int32_t> tokens,
                                                       std::span<const int32_t> top_n) const {
  const size_t R = size_t(opt_.max_rows);
  std::vector<TokenLogprob> out(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (top_n[i] < 0) continue;
    out[i].token = tokens[i];
    out[i].logprob = lp_host_floats_[i];
    const int n = std::min(top_n[i], w_.config.vocab_size);
    for (int k = 0; k < n; ++k)
      out[i].top.emplace_back(lp_host_ints_[R + i * kMaxTopLogprobs + size_t(k)],
                              lp_host_floats_[R + i * kMaxTopLogprobs + size_t(k)]);
  }
  return out;
}

DecodeRun GpuForward::decode_greedy(std::span<PageTable* const> given_tables, std::span<const int32_t> given_first,
                                    int steps, std::span<const int32_t> given_policies) {
  const int n = int(given_tables.size());
  SKIM_REQUIRE(n > 0 && n <= opt_.max_rows && given_first.size() == size_t(n) && steps > 0 &&
                   (given_policies.empty() || given_policies.size() == size_t(n)),
               "decode_greedy: {} sequences, {} first tokens, {} policies, {} steps", n, given_first.size(),
               given_policies.size(), steps);
  std::vector<int32_t> given_positions;
  for (PageTable* t : given_tables) given_positions.push_back(t->length);
  const uint32_t dense = dense_policies(given_tables, given_policies, given_positions);
  // The cs rows first (the step's cs kernels take rows [0, cs_rows)), each group in its order;
  // the tokens come back in the order given.
  const std::vector<bool> cs = cs_marks(given_policies, size_t(n), dense);
  const std::vector<int> order = marked_first(cs);
  const int cs_rows = int(std::count(cs.begin(), cs.end(), true));
  std::vector<PageTable*> tables;
  std::vector<int32_t> first, policies;
  for (int r : order) {
    tables.push_back(given_tables[size_t(r)]);
    first.push_back(given_first[size_t(r)]);
    if (!given_policies.empty()) policies.push_back(given_policies[size_t(r)]);
  }
  std::vector<int32_t> positions;
  int max_len = 0;
  for (PageTable* t : tables) {
    cache_.pool().reserve(*t, t->length + steps);
    positions.push_back(t->length);
    max_len = std::max(max_len, t->length + steps);
  }
  SKIM_REQUIRE(max_len <= opt_.max_pages_per_seq * cache_.shape().page_size,
               "decode_greedy: {} tokens exceed the sequence capacity", max_len);
  if (next_host_steps_ < size_t(steps)) {
    if (next_host_) cudaFreeHost(next_host_);
    check(cudaMallocHost(reinterpret_cast<void**>(&next_host_), size_t(steps) * opt_.max_rows * sizeof(int32_t)), "cudaMallocHost");
    next_host_steps_ = size_t(steps);
  }
  const uint32_t present = stage(tables, first, positions, {}, policies);
  build_cs_tables(tables, positions, policies, dense, steps);
  for (int s = 0; s < steps; ++s) count_decode_bytes(tables, policies, positions, s, dense);
  cudaGraphExec_t exec =
      graph(n, max_len, true, present, dense, -1, cs_rows, split_rows(tables, policies, positions, cs_rows, dense));

  const double ms = gpu_time_ms(stream_, [&] {
    for (int s = 0; s < steps; ++s) {
      check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
      check(cudaMemcpyAsync(next_host_ + size_t(s) * n, next_.data(), n * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync (tokens)");
    }
  });

  if (host_kv_) {  // the timed run has waited for the stream
    host_kv_->enqueue_refused_copy(stream_);
    check(cudaStreamSynchronize(stream_), "host KV refusal");
  }
  check_host_kv();
  DecodeRun out;
  out.seconds = ms / 1e3;
  out.tokens.resize(size_t(steps) * n);
  for (int st = 0; st < steps; ++st)
    for (int i = 0; i < n; ++i) out.tokens[size_t(st) * n + order[size_t(i)]] = next_host_[size_t(st) * n + i];
  for (PageTable* t : tables) t->length += steps;
  return out;
}

}  // namespace skim::cuda
