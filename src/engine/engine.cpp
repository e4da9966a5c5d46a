#include "skim/engine.h"

#ifdef SKIM_HAVE_BLAS
#include <cblas.h>
#endif
#include <omp.h>

#include <algorithm>
#include <functional>
#include <map>

#include "attention/policy.h"
#include "attention/policy_registry.h"
#include "attention/policy_spec.h"
#include "attention/selectors.h"
#include "core/error.h"
#include "engine/field_checks.h"
#include "kv/paged_kv_cache.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/tensor_parallel_forward.h"
#include "engine/logprobs.h"
#include "engine/retro.h"
#include "tokenizer/tokenizer.h"
#ifdef SKIM_HAVE_CUDA
#include "backend/cuda/gpu_forward.h"
#include "backend/cuda/gpu_tensor_parallel.h"
#endif

namespace skim {

#ifdef SKIM_HAVE_CUDA
namespace {

// Which policies have GPU kernels is the registry's (PolicyInfo::backends): the others are
// refused before the model loads. Rectification itself is the engine's (Impl::rectify): a
// dense prefill of the last f tokens, which the GPU forward runs like any prefill chunk.
void require_gpu_policy(const std::string& policy) {
  std::string on_gpu;
  for (const PolicyInfo& info : policy_registry())
    if (info.runs_on("cuda")) on_gpu += (on_gpu.empty() ? "" : ", ") + info.name;
  for (const PolicyPart& part : parse_policy_spec(policy).parts)
    SKIM_REQUIRE(find_policy_info(part.name)->runs_on("cuda"),
                 "policy {}: {} has no GPU kernels yet; with --device cuda only {} run so far "
                 "(the other policies run on the CPU: drop --device cuda)",
                 policy, part.name, on_gpu);
}

}  // namespace
#endif

// A sequence: its pages, the tokens at its positions (rectification re-runs them), how many
// tokens it has taken as decode steps, and its policy (on a forward that mixes policies, each
// sequence runs its own; on the CPU every sequence runs the engine's).
struct Sequence {
  PageTable table;
  std::vector<int> tokens;
  int unrectified = 0;  // decode steps since its last rectification (or its policy's start): ReSA re-runs them
  int retro_steps = 0;  // decode steps under the current policy: RetroAttention's window fills with them
  std::string policy;     // its policy string
  int policy_index = 0;   // the forward's index of it (Forward::acquire_policy), when it mixes
  int rectify_every = 0;  // its policy's EngineCorrections::rectify_every
  int retro_window = 0;   // ... and retro_window: its decode steps also run its last w-1 tokens
};

struct Engine::Impl {
  EngineOptions options;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<PagedKVCache> cache;  // CPU only: the host KV cache CpuForward writes
  std::unique_ptr<AttentionPolicy> policy;
  std::unique_ptr<Forward> forward;
  bool gpu = false;
  std::map<int, Sequence> sequences;
  int next_id = 0;

  Sequence& sequence(int seq) {
    auto it = sequences.find(seq);
    SKIM_REQUIRE(it != sequences.end(), "engine: unknown sequence {}", seq);
    return it->second;
  }
  PageTable& table(int seq) { return sequence(seq).table; }

  ForwardBatch decode_batch(std::span<const int> seqs, std::span<const int> tokens);
  void finish_decode(std::span<const int> seqs, std::span<const int> tokens);

  // Gives sequence `s` the policy `spec` (acquired from a forward that mixes policies).
  void assign_policy(Sequence& s, const std::string& spec) {
    const EngineCorrections corrections =
        spec == options.policy ? policy->corrections() : make_policy(spec)->corrections();
    if (forward->mixes_policies()) {
      const int index = forward->acquire_policy(spec);
      if (!s.policy.empty()) forward->release_policy(s.policy_index);
      s.policy_index = index;
    }
    if (spec != s.policy) s.retro_steps = s.unrectified = 0;  // a new policy has no output cache, nothing to rectify
    s.policy = spec;
    s.rectify_every = corrections.rectify_every;
    s.retro_window = corrections.retro_window;
  }

  void cpu_only(const char* what) const {
    SKIM_REQUIRE(!gpu, "{} runs on the CPU only so far (drop --device cuda)", what);
  }
  void reserve(PageTable& t, int length) { forward->reserve(t, length); }

  // ReSA's dense rectification: each due sequence's tokens decoded since its last one (f, or
  // fewer for one that joins early), written under sparse attention, run again as a dense
  // prefill; their K/V and page digests are overwritten in every layer. Sampled tokens are not
  // changed. The sequences rectified in the same step share forward passes (up to a prefill
  // chunk of rows each: the weights are read once for all of them); a sequence's rows stay in
  // order, split over passes only when they exceed a chunk.
  void rectify(std::span<Sequence* const> due) {
    std::vector<float> none;
    ForwardBatch fb;
    auto flush = [&] {
      if (!fb.tokens.empty()) forward->run(fb, *policy, none), rectification_passes += 1;
      fb = ForwardBatch{};
    };
    for (Sequence* s : due) {
      const int end = s->table.length, count = std::min(s->unrectified, end);
      s->unrectified = 0;
      for (int pos = end - count; pos < end; ++pos) {
        if (int(fb.tokens.size()) == options.prefill_chunk) flush();
        fb.tokens.push_back(s->tokens[size_t(pos)]);
        fb.positions.push_back(pos);
        fb.tables.push_back(&s->table);
      }
      rectified_tokens += uint64_t(count);
    }
    flush();
  }
  uint64_t rectified_tokens = 0, rectification_passes = 0;

  // Runs positions [from, length) again as prefill chunks under the current policy (their K/V
  // come out as a dense prefill's), so a policy switched in after the prefill that learns from
  // prefill queries (CSAttention, MAC: EngineCorrections::prompt_queries) sees them. The
  // chunks start where the prompt's own did (multiples of the chunk size, `from` rounded
  // down): GEMMs over the same rows give the same bits, so the queries, and a policy's
  // decisions on them (MAC's hit threshold), are those of a prefill under the policy.
  void reencode(Sequence& s, int from = 0) {
    std::vector<float> none;
    from -= from % options.prefill_chunk;
    for (int b = from; b < s.table.length; b += options.prefill_chunk) {
      ForwardBatch fb;
      for (int pos = b; pos < std::min(s.table.length, b + options.prefill_chunk); ++pos) {
        fb.tokens.push_back(s.tokens[size_t(pos)]);
        fb.positions.push_back(pos);
        fb.tables.push_back(&s.table);
      }
      forward->run(fb, *policy, none);
    }
  }
};

Engine::Engine(const EngineOptions& o) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = o;
  check_engine_options(o);  // before anything is allocated or a thread started
  // One OpenMP pool drives every core; OpenBLAS runs single-threaded inside it (cpu::linear).
  if (o.threads > 0) omp_set_num_threads(o.threads);
#ifdef SKIM_HAVE_BLAS
  openblas_set_num_threads(1);
#endif
  m.gpu = o.device == "cuda";
  if (m.options.prefill_chunk == 0) m.options.prefill_chunk = m.gpu ? kGpuPrefillChunk : kCpuPrefillChunk;
#ifdef SKIM_HAVE_CUDA
  if (m.gpu) cuda::require_device("--device cuda");  // before the model loads: fail fast
#else
  SKIM_REQUIRE(!m.gpu, "--device cuda: this skim was built without CUDA (configure with -DSKIM_CUDA=ON on a machine with nvcc)");
#endif
  m.policy = make_policy(o.policy);  // before the model loads: a bad flag fails fast
#ifdef SKIM_HAVE_CUDA
  if (m.gpu) require_gpu_policy(o.policy);
#endif
  m.model = load_model(o.model_dir);
  if (o.tensor_parallel > 1) plan_tensor_shard(m.model->config, 0, o.tensor_parallel);  // the heads split
  // A model without tokenizer.json still runs on token ids (tests, eval); text needs one.
  auto tok_path = o.model_dir / "tokenizer.json";
  if (std::filesystem::exists(tok_path)) m.tokenizer = load_tokenizer(tok_path);

  const ModelConfig& c = m.model->config;
#ifdef SKIM_HAVE_CUDA
  if (m.gpu && o.host_kv_slots == 0) {  // each GPU holds its KV heads' share
    ModelConfig per_gpu = c;
    per_gpu.num_kv_heads = std::max(1, c.num_kv_heads / o.tensor_parallel);
    check_kv_memory(per_gpu, o, 2, cuda::device_memory_bytes(), "GPU memory");
  }
#endif
  if (!m.gpu) check_kv_memory(c, o, 4, physical_memory_bytes(), "this machine's memory");
  if (m.gpu && o.host_kv_slots != 0) check_kv_memory(c, o, 2, physical_memory_bytes(), "this machine's memory (pinned)");
  KVCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  int pages_per_seq = (o.max_context + shape.page_size - 1) / shape.page_size;
  shape.num_pages = pages_per_seq * o.max_sequences;
#ifdef SKIM_HAVE_CUDA
  if (m.gpu) {
    cuda::GpuForwardOptions go;
    go.max_rows = std::max(m.options.prefill_chunk, o.max_sequences);
    go.max_pages_per_seq = pages_per_seq;
    go.policy = o.policy;
    go.dense_fallback = o.dense_fallback;
    go.host_kv_slots = o.host_kv_slots;
    go.host_kv_prefetch = o.host_kv_prefetch && o.host_kv_slots != 0;
    if (o.tensor_parallel > 1) {
      m.forward = cuda::make_gpu_tensor_parallel(*m.model, o.tensor_parallel, shape, go);
      return;
    }
    auto gpu = std::make_unique<cuda::GpuForward>(
        std::make_shared<const cuda::GpuWeights>(cuda::upload_weights(*m.model)), shape, go);
    m.forward = std::move(gpu);
    return;
  }
#endif
  if (o.tensor_parallel > 1) {
    const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
    m.forward = make_cpu_tensor_parallel(*m.model, shape, o.tensor_parallel, threads);
    return;
  }
  m.cache = std::make_unique<PagedKVCache>(shape);
  m.forward = std::make_unique<CpuForward>(*m.model, *m.cache);
}

Engine::~Engine() = default;

const ModelConfig& Engine::config() const { return impl_->model->config; }
const Tokenizer& Engine::tokenizer() const {
  SKIM_REQUIRE(impl_->tokenizer != nullptr, "{}: no tokenizer.json in the model directory",
               impl_->options.model_dir.string());
  return *impl_->tokenizer;
}
AttentionPolicy& Engine::policy() { return *impl_->policy; }

int Engine::open_sequence() {
  Sequence s;
  impl_->assign_policy(s, impl_->options.policy);
  int id = impl_->next_id++;
  impl_->sequences.emplace(id, std::move(s));
  return id;
}

void Engine::close_sequence(int seq) {
  Sequence& s = impl_->sequence(seq);
  impl_->policy->forget(&s.table);
  impl_->forward->drop_state(s.table);
  impl_->forward->release(s.table);
  if (impl_->forward->mixes_policies()) impl_->forward->release_policy(s.policy_index);
  impl_->sequences.erase(seq);
}

void Engine::set_sequence_policy(int seq, const std::string& spec) {
  Sequence& s = impl_->sequence(seq);
  if (spec == s.policy) return;
  SKIM_REQUIRE(impl_->forward->mixes_policies(),
               "policy {}: on the CPU every sequence runs the engine's policy ({}); per-sequence policies run "
               "with --device cuda", spec, impl_->options.policy);
  check_policy(spec);
  impl_->assign_policy(s, spec);
}

const std::string& Engine::sequence_policy(int seq) const { return impl_->sequence(seq).policy; }
bool Engine::mixes_policies() const { return impl_->forward->mixes_policies(); }

int Engine::sequence_length(int seq) const { return impl_->table(seq).length; }

void Engine::check_policy(const std::string& spec) const {
  // Reads no engine state: safe beside the worker thread that runs the engine (the server
  // checks requests on its own threads).
  make_policy(spec);
#ifdef SKIM_HAVE_CUDA
  if (impl_->gpu) require_gpu_policy(spec);
#endif
}
const std::string& Engine::policy_spec() const { return impl_->options.policy; }
int Engine::max_context() const { return impl_->options.max_context; }
int Engine::max_sequences() const { return impl_->options.max_sequences; }
int Engine::prefill_chunk() const { return impl_->options.prefill_chunk; }
bool Engine::prefills_by_layer(int seq) const {
  return impl_->forward->runs_prompts_by_layer(impl_->sequence(seq).policy_index);
}
bool Engine::on_gpu() const { return impl_->gpu; }

void Engine::set_policy(const std::string& spec) {
  check_policy(spec);
  // On a forward that mixes policies, one hold first: if the spec cannot be registered (a
  // ninth policy, parameters out of the kernels' range), nothing has changed yet.
  const bool mixes = impl_->forward->mixes_policies();
  const int hold = mixes ? impl_->forward->acquire_policy(spec) : 0;
  impl_->policy = make_policy(spec);
  impl_->forward->policy_replaced();
  impl_->options.policy = spec;
  const int queries = impl_->policy->corrections().prompt_queries;
  for (auto& [id, s] : impl_->sequences) {
    impl_->assign_policy(s, spec);
    s.retro_steps = 0;  // the new policy has no output cache yet
    if (queries > 0 && s.table.length > 0) impl_->reencode(s, std::max(0, s.table.length - queries));
  }
  if (mixes) impl_->forward->release_policy(hold);
}

int Engine::fork_sequence(int seq) {
  Sequence copy = impl_->sequence(seq);  // tokens and counters
  PageTable& src = impl_->table(seq);
  copy.table = PageTable{};
  impl_->forward->reserve(copy.table, src.length);
  impl_->forward->copy_pages(std::span<const int32_t>(src.pages.data(), copy.table.pages.size()), copy.table.pages);
  copy.table.length = src.length;
  if (impl_->forward->mixes_policies()) impl_->forward->acquire_policy(copy.policy);  // the copy's own hold
  int id = impl_->next_id++;
  auto it = impl_->sequences.emplace(id, std::move(copy)).first;
  impl_->policy->fork(&src, &it->second.table);  // per-sequence policy state follows the copy
  impl_->forward->fork_state(src, it->second.table);
  return id;
}

void Engine::truncate_sequence(int seq, int length) {
  Sequence& s = impl_->sequence(seq);
  impl_->forward->shrink(s.table, length);
  s.tokens.resize(size_t(length));
  s.unrectified = 0;
  s.retro_steps = 0;
  impl_->policy->forget(&s.table);
  impl_->forward->drop_state(s.table);
}

uint64_t Engine::rectified_tokens() const { return impl_->rectified_tokens; }
uint64_t Engine::rectification_passes() const { return impl_->rectification_passes; }

double Engine::decode_kv_bytes_read() {
  if (auto bytes = impl_->forward->decode_kv_bytes_read()) return *bytes;  // the GPU's count
  const AttentionStats& s = policy().stats();
  return double(s.decode_keys_read) * config().head_dim * 2 * sizeof(float) + double(s.decode_metadata_bytes);
}

PolicyStats Engine::policy_stats() {
  PolicyStats s;
  s.decode_kv_bytes_read = decode_kv_bytes_read();
  s.rectified_tokens = rectified_tokens();
  s.rectification_passes = rectification_passes();
  s.counters = impl_->gpu ? impl_->forward->counters() : impl_->policy->counters();
  return s;
}

const PagedKVCache& Engine::kv_cache() const {
  impl_->cpu_only("reading the KV cache from the host");
  SKIM_REQUIRE(impl_->cache != nullptr, "reading the KV cache needs one rank (drop --tp): each rank holds its heads'");
  return *impl_->cache;
}
const PageTable& Engine::page_table(int seq) const { return impl_->table(seq); }

std::vector<float> Engine::append(int seq, std::span<const int> tokens,
                                  std::span<const int> logits_at,
                                  const ProgressCallback& on_progress) {
  Impl& m = *impl_;
  PageTable& t = m.table(seq);
  const int n = int(tokens.size());
  if (n == 1 && t.length > 0) {  // a decode step, with the policy's sparse attention
    std::vector<float> logits = decode(std::span<const int>(&seq, 1), tokens);
    std::vector<float> out;
    for (int at : logits_at) {
      SKIM_REQUIRE(at == 0, "append: logits_at offset {} outside the 1 appended token", at);
      out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
  }
  const int vocab = m.model->config.vocab_size;
  SKIM_REQUIRE(t.length + n <= m.options.max_context,
               "prompt too long: {} tokens with {} already in the sequence exceed the context "
               "limit of {} (raise --ctx)",
               n, t.length, m.options.max_context);
  m.reserve(t, t.length + n);

  std::vector<float> out(logits_at.size() * size_t(vocab));
  // The prompt's chunks: rows [b, e) at positions from the sequence's length on.
  const int chunk = m.options.prefill_chunk, start = t.length;
  const bool mixes = m.forward->mixes_policies();
  std::vector<ForwardBatch> chunks;
  std::vector<std::vector<size_t>> dests;  // per chunk, the logits_at entries its rows fill
  for (int b = 0; b < n; b += chunk) {
    const int e = std::min(n, b + chunk);
    ForwardBatch& fb = chunks.emplace_back();
    std::vector<size_t>& dest = dests.emplace_back();
    for (int i = b; i < e; ++i) {
      fb.tokens.push_back(tokens[i]);
      fb.positions.push_back(start + i);
      fb.tables.push_back(&t);
      if (mixes) fb.policy.push_back(m.sequence(seq).policy_index);  // the GPU's MAC rings fill from prompts
    }
    for (size_t j = 0; j < logits_at.size(); ++j)
      if (logits_at[j] >= b && logits_at[j] < e) {
        fb.logits_rows.push_back(logits_at[j] - b);
        dest.push_back(j);
      }
  }
  // A sequence's prompt as its forward runs it: layer by layer where chunk by chunk would cost
  // (the GPU over KV beyond its memory), else chunk by chunk, each chunk's length counted as it lands.
  std::vector<std::vector<float>> chunk_logits(chunks.size());
  const bool by_layer = chunks.size() > 1 && m.forward->runs_prompts_by_layer(m.sequence(seq).policy_index);
  if (by_layer) m.forward->run_by_layer(chunks, chunk_logits);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int b = int(c) * chunk, e = std::min(n, b + chunk);
    if (!by_layer) m.forward->run(chunks[c], *m.policy, chunk_logits[c]);
    m.sequence(seq).retro_steps = 0;  // new prompt tokens are not RetroAttention past rows
    t.length += e - b;
    auto& hist = m.sequence(seq).tokens;
    hist.insert(hist.end(), tokens.begin() + b, tokens.begin() + e);
    for (size_t j = 0; j < dests[c].size(); ++j)
      std::copy_n(chunk_logits[c].data() + j * vocab, vocab, out.data() + dests[c][j] * vocab);
    if (on_progress) on_progress(e, n);
  }
  return out;
}

ForwardBatch Engine::Impl::decode_batch(std::span<const int> seqs, std::span<const int> tokens) {
  SKIM_REQUIRE(seqs.size() == tokens.size() && !seqs.empty(), "decode: one token per sequence");
  ForwardBatch fb;
  fb.decode = true;
  const bool mixes = forward->mixes_policies();
  bool retro = false;  // some sequence runs RetroAttention: every row then names its step
  for (int seq : seqs) retro |= sequence(seq).retro_window > 0;
  std::vector<int> sorted(seqs.begin(), seqs.end());
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  SKIM_REQUIRE(twice == sorted.end(), "decode: sequence {} appears twice in one step", twice == sorted.end() ? 0 : *twice);
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = sequence(seqs[i]);
    PageTable& t = s.table;
    const int w = s.retro_window;
    SKIM_REQUIRE(t.length + 1 <= options.max_context,
                 "sequence {} reached the context limit of {} tokens", seqs[i], options.max_context);
    reserve(t, t.length + 1);
    if (w > 1) {  // RetroAttention: the last w-1 tokens run again before the newest
      RetroRows past = retro_past_rows(s.tokens, t.length, s.retro_steps, w);
      for (size_t j = 0; j < past.tokens.size(); ++j) {
        fb.tokens.push_back(past.tokens[j]);
        fb.positions.push_back(past.positions[j]);
        fb.tables.push_back(&t);
        fb.retro_step.push_back(past.steps[j]);
        if (mixes) fb.policy.push_back(s.policy_index);
      }
    }
    if (retro) fb.retro_step.push_back(s.retro_steps);
    fb.tokens.push_back(tokens[i]);
    fb.positions.push_back(t.length);
    fb.tables.push_back(&t);
    if (mixes) fb.policy.push_back(s.policy_index);
    fb.logits_rows.push_back(int(fb.tokens.size()) - 1);
  }
  return fb;
}

// ReSA: a sequence is due when f steps have passed since its last rectification. When one is,
// every sequence of the batch at least half-way to its own joins it: they then share the pass
// (one read of the weights) and, rectified together, stay in step, so that sequences admitted
// at different times soon rectify as one batch rather than one pass each. Joining early only
// rectifies sooner (fewer tokens, more often): never a token left unrectified.
void Engine::Impl::finish_decode(std::span<const int> seqs, std::span<const int> tokens) {
  bool any_due = false;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = sequence(seqs[i]);
    s.table.length += 1;
    s.tokens.push_back(tokens[i]);
    s.retro_steps += 1;
    if (s.rectify_every > 0) any_due |= ++s.unrectified >= s.rectify_every;
  }
  if (!any_due) return;
  std::vector<Sequence*> due;
  for (int seq : seqs) {
    Sequence& s = sequence(seq);
    if (s.rectify_every > 0 && 2 * s.unrectified >= s.rectify_every) due.push_back(&s);
  }
  rectify(due);
}

std::vector<float> Engine::decode(std::span<const int> seqs, std::span<const int> tokens) {
  Impl& m = *impl_;
  ForwardBatch fb = m.decode_batch(seqs, tokens);
  std::vector<float> logits;
  m.forward->run(fb, *m.policy, logits);
  m.finish_decode(seqs, tokens);
  return logits;
}

std::vector<int> Engine::decode_sample(std::span<const int> seqs, std::span<const int> tokens,
                                       std::span<Sampler* const> samplers, std::span<const int> top_logprobs,
                                       std::vector<TokenLogprob>* logprobs) {
  Impl& m = *impl_;
  SKIM_REQUIRE(samplers.size() == seqs.size(), "decode: one sampler per sequence");
  SKIM_REQUIRE(!logprobs || top_logprobs.size() == seqs.size(), "decode: one logprobs setting per sequence");
  if (m.forward->samples_on_device()) {  // only the tokens (and the log-probabilities asked) come back
    ForwardBatch fb = m.decode_batch(seqs, tokens);
    std::vector<SampleParams> params;
    for (Sampler* s : samplers) {
      const SamplingParams& p = s->params();
      params.push_back({p.temperature, p.top_k, p.top_p, p.seed, s->next_draw()});
    }
    const std::vector<int32_t> top(top_logprobs.begin(), top_logprobs.end());
    std::vector<int32_t> next = m.forward->run_sampled(fb, *m.policy, params, top, logprobs);
    m.finish_decode(seqs, tokens);
    return std::vector<int>(next.begin(), next.end());
  }
  std::vector<float> logits = decode(seqs, tokens);
  const size_t vocab = size_t(m.model->config.vocab_size);
  std::vector<int> next;
  if (logprobs) logprobs->assign(seqs.size(), TokenLogprob{});
  for (size_t i = 0; i < samplers.size(); ++i) {
    const std::span<const float> row(logits.data() + i * vocab, vocab);
    next.push_back(samplers[i]->sample(row));
    if (logprobs && top_logprobs[i] >= 0) (*logprobs)[i] = token_logprob(row, next.back(), top_logprobs[i]);
  }
  return next;
}

}  // namespace skim
