// The CUDA backend: the Llama-family forward pass (model/llama_forward.h, the same sequence of
// ops the CPU runs) on the GPU over the paged bf16 KV cache, for the same batches as
// CpuForward (prefill chunks, decode steps of several sequences): cuBLAS projections, the
// kernels of ops.cuh, and paged attention over positions [0, pos] of each row (written before
// attention runs): the prefill kernel for a chunk of one sequence, the decode kernel for
// decode steps and mixed batches.
//
// A decode step is a CUDA graph (one per batch size and context bucket), replayed after one
// host-to-device copy of the step's inputs; nothing allocates or synchronises inside it.
// decode_greedy goes further for benchmarks: argmax feeds each token back on the device, so
// the steps run back to back with no host involvement at all.
//
// Attention of a decode step is plan + kernel: the planner (decode_planner.h) writes the
// layer's page plan on the device, each row by its own policy's selection (dense: the step's
// page tables; gbsa: group_page_select on the layer's digests; quest: quest_page_select), and
// the paged decode kernel attends over it. The rows' policies are data staged with the step's
// inputs; which policies a step has picks its graph. Prefill chunks are always dense, as on
// the CPU. Policies without a GPU planner run on the CPU only (the engine refuses them here,
// by the registry).
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <optional>
#include <string>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "attention/art_decode_args.h"
#include "backend/cuda/cs_state.h"
#include "backend/cuda/decode_planner.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gpu_kv_cache.h"
#include "backend/cuda/host_kv_slots.h"
#include "backend/cuda/gpu_weights.h"
#include "backend/cuda/mac_state.h"
#include "backend/cuda/retro_state.h"
#include "backend/cuda/ops.cuh"
#include "model/forward.h"
#include "model/tensor_shard.h"

namespace skim::cuda {

struct GpuForwardOptions {
  int max_rows = 512;          // rows of one forward pass: a prefill chunk or a decode batch
  int max_pages_per_seq = 0;   // page-table row length: a sequence's capacity in pages
  std::string policy = "dense";  // policy index 0: its selection plans decode steps (DecodePlanner)
  // Decode steps whose selection would save less than it costs attend every key instead
  // (DecodePlanner::dense_fallback; the engine's default). Off: every step runs its policies.
  bool dense_fallback = false;
  // KV beyond GPU memory (host_kv_slots.h): > 0 keeps the K/V pools in pinned host memory and
  // reads a decode step's selected pages through a device cache of this many pages per layer and
  // KV head (a selection's distinct pages per KV head in a step must fit: 2x them hits well).
  // Rows attending every key read the host pools directly (over PCIe: slow). Prefill reads them
  // directly too. MAC, Retro and ART map the lists they read (ART copies its whole lists before
  // its traversal may stop). 0: every pool on the device.
  // kHostKvSlotsAuto (-1): as many slots as the device's memory holds once this forward's other
  // buffers are allocated, less a reserve (HostKVSlots::most_that_fit).
  int host_kv_slots = 0;
  // With host_kv_slots: each decode step copies layer l + 1's pages ahead, guessed from layer l's
  // input while layer l runs (gpu_forward_prefetch.cpp). Outputs unchanged; PCIe bytes grow by
  // the guess's wrong pages. Off: each layer's misses are copied when its selection is known.
  bool host_kv_prefetch = false;
  // Tensor parallelism (gpu_tensor_parallel.h): this rank's shard (its weights are
  // shard_model's) and its NCCL communicator; none: the whole model on this GPU.
  std::optional<TensorShard> shard;
  Communicator* comm = nullptr;
  // With the shard's KV head replicated (more GPUs than KV heads): the GPUs holding it, which
  // gather the group's queries so each attends the whole group (model/tensor_shard.h).
  Communicator* kv_group = nullptr;
};

struct DecodeRun {
  std::vector<int32_t> tokens;  // [steps][n] the greedy tokens
  double seconds = 0;           // GPU time of all steps (events around them)
};

// Row r's policy index in a batch's per-row indices (none given: every row the engine's, 0).
inline int row_policy_of(std::span<const int32_t> policies, size_t r) { return policies.empty() ? 0 : policies[r]; }
// Whether row r of a decode batch is a RetroAttention past row: the next row is its sequence's.
inline bool retro_past_row(std::span<PageTable* const> tables, size_t r) {
  return r + 1 < tables.size() && tables[r + 1] == tables[r];
}

class GpuForward final : public Forward, private Backend {
 public:
  GpuForward(std::shared_ptr<const GpuWeights> weights, const KVCacheShape& cache_shape,
             const GpuForwardOptions& options);
  ~GpuForward() override;

  void run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) override;

  // Sampled on the device: only the tokens come back to the host, not the logits.
  bool samples_on_device() const override { return true; }
  std::vector<int32_t> run_sampled(const ForwardBatch& batch, AttentionPolicy& policy,
                                   std::span<const SampleParams> params, std::span<const int32_t> top_logprobs = {},
                                   std::vector<TokenLogprob>* logprobs = nullptr) override;
  void reserve(PageTable& table, int length) override { cache_.pool().reserve(table, length); }
  void release(PageTable& table) override {
    drop_state(table);
    cache_.pool().release(table);
  }
  void shrink(PageTable& table, int length) override { cache_.pool().shrink(table, length); }
  // Enqueued on the stream, no wait: every later use of the pages runs on the same stream.
  void copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) override;
  // MAC's rings follow a forked sequence (enqueued, no wait) and are dropped with a cut one.
  void fork_state(const PageTable& from, const PageTable& to) override {
    bool moved = false;
    mac_.fork(&from, &to, moved, stream_);
    retro_.fork(&from, &to, moved, stream_);
    if (cs_) cs_->fork(&from, &to, moved, stream_);
    if (moved) drop_graphs();  // the state grew: the graphs point at freed memory
  }
  void drop_state(const PageTable& table) override {
    mac_.drop(&table);
    retro_.drop(&table);
    if (cs_) cs_->drop(&table);
  }
  // Benchmarks: each table's sequence (of policy index policies[i], cs or not) as if its
  // t.length tokens had been prefilled under it; for cs, a prompt sample of random queries.
  void bench_prompts(std::span<PageTable* const> tables, std::span<const int32_t> policies);
  // A decode batch mixes policies: each row is planned by its own (decode_planner.h).
  bool mixes_policies() const override { return true; }
  // KV beyond GPU memory (gpu_forward_by_layer.cpp): a prompt of several chunks runs layer by
  // layer, each layer's K/V in a device pool meanwhile (read by every chunk's attention there, not
  // over PCIe), then written to the host pool once; the residual stream between layers on the
  // device. Policies with prefill-time state of their own (cs's query sample, MAC's rings) run
  // chunk by chunk.
  bool runs_prompts_by_layer(int policy_index) const override;
  void run_by_layer(std::span<const ForwardBatch> chunks, std::vector<std::vector<float>>& logits) override;
  int acquire_policy(const std::string& policy) override;
  void release_policy(int index) override;

  // `steps` greedy decode steps of the sequences whose next inputs are `first` (one token
  // each, at position table->length); reserves their pages and advances their lengths.
  // `policies`: each sequence's policy index (acquire_policy); empty: index 0 for all.
  DecodeRun decode_greedy(std::span<PageTable* const> tables, std::span<const int32_t> first, int steps,
                          std::span<const int32_t> policies = {});

  // K/V and digest bytes one decode row at `length` tokens (the new one included) reads over
  // all layers under policy `index`, by its planner: every key when dense, the kept pages
  // plus the digests when sparse (for quest the per-head budget: the union's floor).
  double decode_bytes_read(int length, int index = 0) const;
  // The same for a row attending every key (dense, or a dense fallback).
  double dense_decode_bytes(int length) const { return w_.config.num_layers * planner_->dense_bytes(length); }
  // The bytes every decode row run so far read (Forward): counted by the host from the plans'
  // shapes, and for quest's unions on the device (read back here: waits for the stream).
  std::optional<double> decode_kv_bytes_read() const override {
    return decode_bytes_total_ + planner_->device_bytes(stream_) + art_bytes_read() + mac_.bytes_read(stream_) +
           retro_.bytes_read(stream_);
  }
  // KV beyond GPU memory: the device cache's pages copied and hits so far (waits for the
  // stream); zeros without it.
  HostKVSlots::Totals host_kv_totals() const { return host_kv_ ? host_kv_->totals(stream_) : HostKVSlots::Totals{}; }
  int host_kv_slot_count() const { return host_kv_ ? host_kv_->slots() : 0; }  // auto's choice too
  // Forward: host_kv_totals by name (waits for the stream); none without host KV.
  std::map<std::string, double> counters() const override;
  // Decode rows so far whose policy fell back to dense (GpuForwardOptions::dense_fallback).
  uint64_t dense_fallback_rows() const { return dense_fallback_rows_; }
  // ART's counters since the forward began (the device's: waits for the stream).
  ArtDecodeStats art_stats() const;
  // Benchmarks only: MAC rows hit at this rate (per mille; -1: by their rule), whatever the
  // distances, so that skim bench times the hit rates it names.
  void force_mac_hits(int per_mille) {
    mac_forced_hits_ = per_mille;
    drop_graphs();
  }

  GpuKVCache& cache() { return cache_; }
  Communicator* communicator() const { return opt_.comm; }  // tensor parallelism's; null alone
  // Tensor parallelism: one all-reduce and one all-gather of the largest sizes a pass sends,
  // run eagerly on every rank at once, so that NCCL sets up its connections before any is
  // captured in a CUDA graph (a first use inside a capture fails). Waits for them.
  void warm_collectives();
  const GpuWeights& weights() const { return w_; }
  cudaStream_t stream() const { return stream_; }

 private:
  // How the pass in flight runs: what enqueue() was asked, read by the Backend ops.
  struct Pass {
    int max_seq_len = 0;  // of the rows (a graph's context bucket when captured)
    bool gather = false;  // logits of the staged logits rows, else of rows [0, n_logits)
    bool chunk = false;   // the rows are consecutive positions of one sequence (a prefill
                          // chunk), or of `seqs` sequences one after another (ReSA rectifying
                          // several in one pass): attention runs as paged prefill attention
    int seqs = 1;
    bool decode = false;  // every row is a decode step (the planner's selection applies)
    uint32_t policies = 1;  // bit i: some row runs policy index i
    uint32_t dense_policies = 0;  // bit i: policy i's rows attend every key (the dense fallback)
    // A prefill chunk of a sequence that runs MAC: its rows [mac_first, n) (the last ring's
    // worth) become ring entries, their prefix states over [0, mac_prefix_end(pos, mac_band)).
    int mac_first = -1, mac_band = 0;
    int cs_slot = -1;  // a prefill chunk of a sequence that runs cs: its slot (its queries are sampled)
    int cs_rows = 0;   // a decode step's rows that run cs: its first (launch() puts them there)
    int split_rows = 0;  // the page kernel's PagedDecodeArgs::split_rows (split_rows())
    // Every row reads row 0's page table (one sequence's chunk, staged with that table alone:
    // a prompt layer by layer stages each chunk once a layer, and a 512K table is 128 KB a row).
    bool one_table = false;
    bool prefetch = false;  // over host KV, the next layer's pages copied ahead (prefetches())
  };
  // Enqueues the whole forward pass of n staged rows on the stream, logits of `logits_n` rows;
  // `advance`: then each row's argmax becomes its next input (decode_greedy).
  void enqueue(int n, int logits_n, const Pass& pass, bool advance);
  // Backend: the ops of model/llama_forward.h, enqueued on the stream.
  void embed(int n) override;
  void add_rmsnorm(int n, int layer, NormWeight weight, bool residual) override;
  void linear(int n, int layer, Projection p) override;
  void qkv_rope_append(int n, int layer) override;
  void attention(int n, int layer) override;
  void silu_mul(int n) override;
  void all_reduce(int n) override;
  void logits(int n_logits) override;
  // Copies the step's inputs to the device; returns the policies present (Pass::policies).
  // one_table: only row 0's page table (Pass::one_table).
  uint32_t stage(std::span<PageTable* const> tables, std::span<const int32_t> tokens,
                 std::span<const int32_t> positions, std::span<const int> logits_rows,
                 std::span<const int32_t> policies, std::span<const int32_t> retro_steps = {},
                 bool one_table = false);
  void attend_decode(int layer, int n, int max_seq_len, const int32_t* table, const int32_t* seq_lens,
                     cudaStream_t stream);
  // MAC (gpu_forward_mac.cpp): the step's layer over the base `plan` (match, cut, two kernel
  // passes, merge and push), and a prefill chunk's rows into the rings.
  void attend_mac(int layer, int n, const DevicePlan& plan, const PagedDecodeArgs& base, cudaStream_t stream);
  void fill_mac_rings(int layer, int n, cudaStream_t stream);
  // RetroAttention (gpu_forward_retro.cpp): the step's layer over the base `plan` (the past
  // rows' unseen pages, one kernel pass, the merge with their cached states).
  void attend_retro(int layer, int n, const DevicePlan& plan, const PagedDecodeArgs& base, cudaStream_t stream);
  bool retro_fold(const DevicePlan& plan) const;
  void reserve_retro(bool& moved);
  // CSAttention (gpu_forward_cs.cpp): its state once a cs policy is registered; a prefill
  // chunk's queries sampled; a decode step's tables built before its graph (host code); the
  // step's layer as a token plan over the rows' own pages.
  void reserve_cs(int index, bool& moved);
  void begin_cs_chunk(const ForwardBatch& batch, Pass& pass);
  // Rows of policies in `dense` fall back to dense (dense_policies): no tables built.
  void build_cs_tables(std::span<PageTable* const> tables, std::span<const int32_t> positions,
                       std::span<const int32_t> policies, uint32_t dense, int steps = 1);
  void attend_cs(int layer, int n, const PagedDecodeArgs& base, cudaStream_t stream);
  void attend_pages(int layer, int n, const DevicePlan& plan, PagedDecodeArgs a, cudaStream_t stream);
  // rules: the rows' ART rules (null: plan.art_rules); heads_listed: ArtDecodeArgs::heads_listed.
  void run_art(const PagedDecodeArgs& a, const DevicePlan& plan, cudaStream_t stream,
               const ArtRowRule* rules = nullptr, const uint32_t* heads_listed = nullptr);
  // The o projection's bf16 input, for a layer's last attention kernel that writes every row's
  // output: attention() then skips its conversion of o_ (a launch a layer less).
  uint16_t* o16_from_attention() {
    o_in_bf16_ = true;
    return o16_.data();
  }
  bool o_in_bf16_ = false;  // this layer's decode attention wrote o16_ itself
  // Over host KV: a selecting plan's lists through the device page cache (gpu_forward.cpp).
  void read_through_cache(int layer, int n, const DevicePlan& plan, PagedDecodeArgs& a, cudaStream_t stream);
  void check_host_kv();
  // The prefetch over host KV (gpu_forward_prefetch.cpp): its stream, events and buffers when
  // enabled; whether a pass runs it; the branch forked after layer l's input norm for layer
  // l + 1; the waits for its read of x (before layer l's MLP norm) and for all of it (before
  // layer l + 1's map).
  void reserve_prefetch();
  void destroy_prefetch();
  bool prefetches(const Pass& pass) const;
  void fork_prefetch(int n, int layer);
  void wait_prefetch_read();
  void join_prefetch(int layer, cudaStream_t stream);
  // A branch's stream and buffers by the parity of the layer it copies for: layer l + 2's branch
  // is forked (after layer l + 1's input norm) before layer l + 1's has ended, and runs its
  // guess while the other's copies cross PCIe.
  cudaStream_t prefetch_stream_[2] = {nullptr, nullptr};
  cudaEvent_t prefetch_fork_ = nullptr, prefetch_read_ = nullptr, prefetch_join_[2] = {nullptr, nullptr};
  bool read_pending_ = false;
  int join_pending_[2] = {-1, -1};  // the layer whose branch each join event ends (by parity), or -1
  std::unique_ptr<Gemm> guess_gemm_[2];  // their own cuBLAS workspaces: they run beside the step's
  DeviceBuffer<uint16_t> guess_h_[2], guess_q_[2];  // the guessed input of the layer and its query (bf16)
  DeviceBuffer<float> guess_qkv_[2];                // its query projection
  void reserve_mac(bool& moved);
  // The decode step's graph; logits_n >= 0: the logits of that many staged rows (gathered),
  // else of every row in order; its first cs_rows rows run cs (Pass::cs_rows).
  cudaGraphExec_t graph(int n, int max_seq_len, bool advance, uint32_t policies, uint32_t dense_policies,
                        int logits_n, int cs_rows, int split);
  void count_decode_bytes(std::span<PageTable* const> tables, std::span<const int32_t> policies,
                          std::span<const int32_t> positions, int ahead, uint32_t dense);
  int split_rows(std::span<PageTable* const> tables, std::span<const int32_t> policies,
                 std::span<const int32_t> positions, int first, uint32_t dense);
  // Which of n rows run cs: their policy's, unless it falls back to dense (in `dense`).
  std::vector<bool> cs_marks(std::span<const int32_t> policies, size_t n, uint32_t dense) const;
  // A decode step's rows that run cs (cs_marks); when they are not its first rows, `ordered`
  // receives the batch with them first (in their order, the others after in theirs) and its
  // logits rows following their rows, and `reordered` is set.
  int cs_rows_first(const ForwardBatch& batch, uint32_t dense, ForwardBatch& ordered, bool& reordered) const;
  // The step's policies attending every key (Pass::dense_policies): none unless dense_fallback.
  uint32_t dense_policies(std::span<PageTable* const> tables, std::span<const int32_t> policies,
                          std::span<const int32_t> positions);
  void enqueue_logprobs(int nl, std::span<const int32_t> top_n);
  std::vector<TokenLogprob> collect_logprobs(std::span<const int32_t> tokens, std::span<const int32_t> top_n) const;
  void drop_graphs();
  // Stages the batch and enqueues its forward pass (a graph for decode batches); returns the
  // number of logits rows.
  int launch(const ForwardBatch& batch);
  // A batch's rows within a pass, its tokens in the vocabulary, its logits rows among its rows.
  void require_rows(const ForwardBatch& batch) const;
  int bucket(int max_seq_len) const;

  std::shared_ptr<const GpuWeights> weights_;
  const GpuWeights& w_;
  GpuKVCache cache_;
  std::unique_ptr<HostKVSlots> host_kv_;  // GpuForwardOptions::host_kv_slots
  GpuForwardOptions opt_;
  Gemm gemm_;
  cudaStream_t stream_ = nullptr;
  // A branch of a decode step beside stream_ (cs's rows beside the page plan's), forked and
  // joined by the two events within the step.
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  Pass pass_;
  bool mac_index_made_ = false;  // this pass's MAC plans made the page index map (MacPagePlanArgs::index_ready)

  // Activations, sized for max_rows.
  DeviceBuffer<float> x_, y_, qkv_, o_, lse_, gate_up_, logits_;
  // Tensor parallelism: this rank's vocabulary slice of the logits [max_rows][stride] and every
  // rank's gathered [ranks][max_rows][stride].
  DeviceBuffer<float> slice_logits_, gathered_logits_;
  // A replicated KV head's rank: its own heads' q and q_pre [max_rows][own heads][head_dim]
  // (q_ and q_pre_ then hold the group's, gathered), the group's gathered by rank, and its own
  // heads' attention output, the o projection's input.
  DeviceBuffer<uint16_t> q_own_, q_pre_own_, gathered_q_, o16_own_;
  bool replicated() const { return opt_.shard && opt_.shard->replicated(); }
  // Rows of a decode step of one row per sequence (no Retro past rows): the sequences the cache
  // holds, not a prefill chunk's rows (what host KV's and cs's per-step buffers are sized by).
  int sequence_rows() const {
    return std::max(1, std::min(opt_.max_rows, cache_.shape().num_pages / opt_.max_pages_per_seq));
  }
  // [ranks][n][own] gathered from the group's ranks -> [n][ranks x own] (own: elements per row).
  void gather_group_rows(const uint16_t* mine, uint16_t* group, int n);
  DeviceBuffer<uint16_t> h_, h_rows_, q_, o16_, inter_;
  DeviceBuffer<uint8_t> attn_workspace_;
  // ART (cuda::art_decode_attention), once a policy with art is registered: its workspace (for
  // any batch, rounds of 4 pages: the most rounds) and its counters.
  DeviceBuffer<uint8_t> art_workspace_;
  DeviceBuffer<ArtDecodeStats> art_stats_;
  void reserve_art(bool& moved);
  double art_bytes_read() const;
  DeviceBuffer<uint8_t> prefill_workspace_;  // key splits of short prefill chunks
  std::unique_ptr<DecodePlanner> planner_;  // the policies' selection stage
  MacState mac_;                            // MAC's rings, once a MAC policy is registered
  int mac_forced_hits_ = -1;
  DeviceBuffer<uint16_t> q_pre_;            // pre-RoPE queries [max_rows][heads][head_dim] (MAC)
  RetroState retro_;                        // RetroAttention's masks and caches, once a retro policy is registered
  std::unique_ptr<CsState> cs_;             // CSAttention's tables, once a cs policy is registered
  std::string cs_policy_;                   // the policy string cs_ was made for
  DeviceBuffer<uint8_t> token_workspace_;   // token_decode_attention's (cs)
  // A prompt layer by layer (run_by_layer): its residual stream [rows][hidden] between layers,
  // one layer's K/V pools on the device (the cache's layout and page ids), the sequence's pages
  // before the prompt and those it writes; while set, pass_k_/pass_v_ are the pools the pass's
  // ops read and write instead of the cache's. Each chunk's step inputs are staged once into
  // prompt_inputs_ and copied on the device per layer: staging_ is rewritten by the host, so
  // restaging a chunk while earlier copies wait on the stream would hand them its values.
  DeviceBuffer<float> prompt_x_;
  DeviceBuffer<int32_t> prompt_inputs_;
  DeviceBuffer<uint16_t> layer_k_, layer_v_;
  DeviceBuffer<int32_t> prefix_pages_, prompt_pages_;
  uint16_t *pass_k_ = nullptr, *pass_v_ = nullptr;
  uint16_t* pass_k(int layer) { return pass_k_ ? pass_k_ : cache_.k(layer); }
  uint16_t* pass_v(int layer) { return pass_v_ ? pass_v_ : cache_.v(layer); }
  double decode_bytes_total_ = 0;  // the host-counted part
  // Step inputs: tokens, positions, seq_lens, logits rows [max_rows] each, then the page
  // table [max_rows][max_pages_per_seq]; staged in pinned memory, copied in one transfer.
  DeviceBuffer<int32_t> inputs_;
  int32_t* staging_ = nullptr;
  int staged_runs_ = 0;  // runs of rows of one sequence in the staged pass (InputLayout::seq_rows)
  DeviceBuffer<int32_t> next_;  // argmax (or sample) of each logits row
  DeviceBuffer<SampleParams> sample_params_;
  SampleParams* sample_staging_ = nullptr;  // pinned [max_rows]
  // Log-probabilities of the sampled tokens (token_logprobs.cuh): the alternatives wanted per
  // row, then per row its token's log-probability and the top ids and log-probabilities;
  // pinned host copies of the same layout.
  DeviceBuffer<int32_t> lp_top_n_, lp_top_ids_;
  DeviceBuffer<float> lp_logprob_, lp_top_values_;
  int32_t* lp_host_ints_ = nullptr;   // [max_rows] top_n, then [max_rows][kMaxTopLogprobs] ids
  float* lp_host_floats_ = nullptr;   // [max_rows] logprob, then [max_rows][kMaxTopLogprobs]
  int32_t* next_host_ = nullptr;  // pinned [max steps of a decode_greedy call][max_rows]
  size_t next_host_steps_ = 0;

  // Decode step graphs by (rows, context bucket, advance, policies present, policies falling
  // back to dense, gathered logits rows, cs rows, the page kernel's split rows).
  std::map<std::tuple<int, int, bool, uint32_t, uint32_t, int, int, int>, cudaGraphExec_t> graphs_;
  uint64_t dense_fallback_rows_ = 0;
  std::vector<int32_t> fallback_lengths_;  // dense_policies' scratch
  std::vector<int64_t> split_tokens_;      // split_rows' scratch
};

}  // namespace skim::cuda
