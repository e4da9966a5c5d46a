// skim's library API: load a Hugging Face model, then generate with an attention policy.
// The CLI (`skim generate | bench | eval`) and the server are thin layers over this.
#pragma once

#include <filesystem>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "skim/policy.h"
#include "skim/sampling.h"
#include "skim/stats.h"

namespace skim {

struct ModelConfig;
class Tokenizer;
class AttentionPolicy;
class PagedKVCache;
struct PageTable;

// The default prefill chunks: on the CPU a chunk's time grows with it and 512 keeps a server's
// other sequences moving; on the GPU 2048 rows prefill the Llama-3.1-8B shape 1.2x faster than
// 512 at 8K, within 6% of 4096 and 8192 (bench/results/2026-11-26-h100-flash-prefill/), and
// stall the others about 70 ms there.
inline constexpr int kCpuPrefillChunk = 512;
inline constexpr int kGpuPrefillChunk = 2048;
// A server with a prefix cache keeps prompts cut to whole chunks (so that a resumed prefill
// equals an uncached one): its default chunk stays this fine on every device, or prompts under
// 2048 tokens could not be kept on the GPU.
inline constexpr int kPrefixCachePrefillChunk = 512;

struct EngineOptions {
  std::filesystem::path model_dir;
  std::string policy = "dense";
  int max_context = 16384;   // tokens per sequence (prompt + generated)
  int max_sequences = 1;     // sequences whose KV fits at once
  // Prompt tokens per forward pass; 0: the device's default (kCpuPrefillChunk or
  // kGpuPrefillChunk). Longer chunks prefill faster, and stall the decode steps of other
  // sequences longer (the scheduler runs one chunk per step).
  int prefill_chunk = 0;
  int threads = 0;           // 0: all cores
  std::string device = "cpu";  // "cpu", or "cuda" (dense, streaming, gbsa, resa and quest so far)
  // Tensor parallelism: ranks the model is split over (heads by KV group, the MLP, the
  // vocabulary), one thread each on the CPU, sharing `threads`. 1: none.
  int tensor_parallel = 1;
  // GPU: a decode step's sparse policy (gbsa, resa, quest) attends every key instead where its
  // selection would cost more than the reads it saves (short contexts at small batches; dense
  // reads lose no quality). False: every step selects, as on the CPU (for comparing the two).
  bool dense_fallback = true;
  // GPU: KV beyond GPU memory (issue 18, first cut): > 0 keeps the K/V cache in pinned host
  // memory (the context is bounded by this machine's memory, not the GPU's) and reads each decode
  // step's selected pages through a device cache of this many pages per layer and KV head (about
  // twice a step's selected pages per KV head). dense, streaming, quest, gbsa and resa; rows that
  // attend every key (dense, dense layers, prefill) read the host memory directly, over PCIe.
  // 0: the KV cache on the GPU. -1 (`--host-kv-slots auto`): as many slots as the GPU's memory
  // holds beside the weights and the engine's buffers, less a reserve of a tenth of the GPU (at
  // least 2 GiB) for what policies allocate later.
  int host_kv_slots = 0;
  // With host_kv_slots (inert without): each decode step copies the next layer's pages ahead,
  // selected by a query guessed from the layer before's input, while that layer runs (outputs
  // unchanged; PCIe carries the guess's wrong pages too). On by default: 1.29-1.34x faster steps
  // at 512K (bench/results/2026-11-27-s26-host-gather-ctas/).
  bool host_kv_prefetch = true;
};

struct GenerationRequest {
  std::string prompt;
  std::vector<int> prompt_ids;  // used instead of `prompt` when not empty
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings; the text is cut before the match
  bool ignore_eos = false;
  // Log-probabilities (the server): -1 none; n >= 0: each generated token's, with
  // the n most likely alternatives. echo_logprobs: the prompt tokens' too (all but the first).
  int logprobs = -1;
  bool echo_logprobs = false;
};

struct GenerationStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  // The first decode step alone (within decode_seconds): policies that build per-sequence state
  // from the prompt at the first step (CS tables, MAC ring states) pay it here.
  double first_step_seconds = 0;
  double kv_bytes_per_step = 0;  // KV bytes attention read per decode step, all layers
  std::string finish_reason;     // "stop" (EOS or a stop string) or "length"
};

struct GenerationResult {
  std::vector<int> tokens;
  std::string text;
  GenerationStats stats;
  std::vector<TokenLogprob> logprobs;         // one per token of `tokens` (GenerationRequest::logprobs)
  std::vector<TokenLogprob> prompt_logprobs;  // prompt tokens 1.. (echo_logprobs)
};

// Called with each piece of text as it becomes printable (complete UTF-8).
using TextCallback = std::function<void(size_t request, std::string_view text)>;
// Called after each prefill chunk: tokens done of total.
using ProgressCallback = std::function<void(int done, int total)>;

class Engine {
 public:
  explicit Engine(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const;
  AttentionPolicy& policy();

  // Runs requests to completion on the scheduler's steps (the server's loop, on this thread):
  // prompts prefill chunk by chunk, live sequences advance one token per decode step, and at
  // most max_sequences() run at once (the others wait their turn). Throws skim::Error on the
  // first request that fails.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests,
                                         const TextCallback& on_text = {},
                                         const ProgressCallback& on_progress = {});

  // Low-level access for tests and evaluation (teacher forcing).
  int open_sequence();
  void close_sequence(int seq);
  int sequence_length(int seq) const;
  // Appends tokens to a sequence in chunks; returns the logits [logits_at.size()][vocab] of the
  // appended positions listed in logits_at (offsets into `tokens`). A single token appended
  // to a non-empty sequence runs as a decode step.
  std::vector<float> append(int seq, std::span<const int> tokens, std::span<const int> logits_at,
                            const ProgressCallback& on_progress = {});
  // One decode step of several sequences, one token each; logits [seqs.size()][vocab].
  // Runs the policy's engine-level corrections (rectification) when they fall due.
  std::vector<float> decode(std::span<const int> seqs, std::span<const int> tokens);

  // Replaces the attention policy, the engine's and every sequence's (prefilled caches stay
  // valid: prefill is always dense); new sequences run it.
  void set_policy(const std::string& spec);
  // Per-sequence policies: on an engine that mixes_policies() (the GPU), sequences with
  // different policies decode in one batch, each planned by its own. Elsewhere a sequence's
  // policy is the engine's, and asking another throws skim::Error.
  bool mixes_policies() const;
  void set_sequence_policy(int seq, const std::string& spec);
  const std::string& sequence_policy(int seq) const;
  // A new sequence with a copy of `seq`'s cache and tokens: one dense prefill, several policies.
  int fork_sequence(int seq);
  // Keeps the first `length` tokens of `seq` (a multiple of the page size, at most its
  // length) and frees the rest; the policy forgets the sequence's state (MAC rings, CS tables,
  // Retro outputs), so this suits policies that keep none (the server's prefix cache).
  void truncate_sequence(int seq, int length);

  // One decode step, then each sequence's next token from its sampler (sampled on the device
  // for the GPU, so only the tokens come back). What Engine::generate and the server's
  // scheduler run per step. With `logprobs`, top_logprobs[i] >= 0 asks sequence i's token's
  // log-probability and that many alternatives (OpenAI's logprobs; on the GPU computed on the
  // device): (*logprobs)[i].
  std::vector<int> decode_sample(std::span<const int> seqs, std::span<const int> tokens,
                                 std::span<Sampler* const> samplers, std::span<const int> top_logprobs = {},
                                 std::vector<TokenLogprob>* logprobs = nullptr);
  // Throws skim::Error when set_policy(spec) would: an unknown policy or key, or a policy the
  // device cannot run. Switches nothing.
  void check_policy(const std::string& spec) const;
  const std::string& policy_spec() const;
  int max_context() const;
  int max_sequences() const;
  int prefill_chunk() const;
  // Whether a prompt appended to `seq` in one call runs layer by layer (the GPU over KV beyond
  // its memory: each layer's K/V crosses PCIe once, where chunk by chunk appends would read the
  // prefix once per chunk). A scheduler then appends such a prompt whole.
  bool prefills_by_layer(int seq) const;
  bool on_gpu() const;

  // Tokens re-encoded by rectification so far, and the forward passes that did it.
  uint64_t rectified_tokens() const;
  uint64_t rectification_passes() const;
  // KV bytes (keys, values and policy metadata, all layers) decode steps have read so far.
  double decode_kv_bytes_read();
  // Both, and the policy's counters.
  PolicyStats policy_stats();
  const PagedKVCache& kv_cache() const;
  const PageTable& page_table(int seq) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace skim
