// KV beyond GPU memory, copied ahead (issue 18's overlap; docs/design.md "KV beyond GPU memory",
// point 5): in a decode step over host KV, layer l + 1's pages are guessed and copied into its
// device cache while layer l runs, on a second stream of the step's graph:
//   fork, after layer l's input norm (x is then layer l's input), on a stream of two by the
//   parity of l + 1 (layer l + 2's branch starts while l + 1's copies still cross PCIe):
//     x through layer l + 1's input norm, its query projection and RoPE (InfiniGen's guess: the
//     residual changes little across one layer), the step's selection over that query into the
//     planner's guess buffers (DecodePlanner::guess), and a prefetch map and gather of its lists
//     into layer l + 1's cache (HostKVSlots::prefetch_layer: stamped as the step before's, into
//     slots the step before did not use);
//   layer l's MLP norm waits for the guess's read of x (it adds the attention's output to x);
//   layer l + 1's map waits for the whole branch (its cache's state), and finds what the guess
//     copied resident: those misses crossed PCIe beside layer l's compute.
// The outputs are those without it, bit for bit: the step's own map still copies whatever its
// lists miss. On SmolLM2 at 8K this guess hid 64-67% of the misses at 1.4-2.0 pages copied per
// miss (bench/results/2026-11-27-cpu-prefetch-ahead/); on the GPU it took 50-76% of the demo
// model's own-map copies off them, and on the 8B bench's 512K steps 72-74%. Its gathers take
// 4 CTAs a KV head (HostKVSlots): at 128, as the layers' own gathers, they held every SM and the
// step got no faster; at 4 they keep the PCIe link at its rate (51 GB/s) beside the compute, and
// quest 5% at 512K, b1, takes 32.2 ms a step against 43.3 without the prefetch, gbsa 5% 28.2
// against 36.2 (H100, bench/results/2026-11-27-s26-host-gather-ctas/). MAC, Retro and cs rows
// (their own lists and maps) turn it off for the step.
#include "backend/cuda/gpu_forward.h"

#include <bit>

#include "backend/cuda/gpu_inputs.h"

namespace skim::cuda {

void GpuForward::reserve_prefetch() {
  if (!opt_.host_kv_prefetch) return;
  const ModelConfig& c = w_.config;
  const size_t R = size_t(opt_.max_rows);
  for (cudaEvent_t* e : {&prefetch_fork_, &prefetch_read_, &prefetch_join_[0], &prefetch_join_[1]})
    check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
  // The branches at the highest priority: a kernel of the step's own stream fills every SM (the
  // GEMVs, the page kernel), and a branch's kernels, short but on the copies' path, should not
  // wait for the SMs to drain. Measured alone (the gathers then still at 128 CTAs a KV head) it
  // changed nothing: 46.17 against 46.54 ms, quest 5% at 512K (H100, 2026-11-27); what made the
  // branch pay was its gather's few CTAs.
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  for (int i = 0; i < 2; ++i) {
    check(cudaStreamCreateWithPriority(&prefetch_stream_[i], cudaStreamNonBlocking, greatest), "cudaStreamCreate");
    guess_gemm_[i] = std::make_unique<Gemm>();
    guess_h_[i].resize(R * c.hidden_size);
    guess_qkv_[i].resize(R * c.q_dim());
    guess_q_[i].resize(R * c.q_dim());
  }
}

bool GpuForward::prefetches(const Pass& p) const {
  if (!host_kv_ || !opt_.host_kv_prefetch || !p.decode || p.chunk) return false;
  for (uint32_t m = p.policies; m; m &= m - 1) {
    const int i = std::countr_zero(m);
    if (planner_->mac_rule(i) || planner_->retro_rule(i) || planner_->cs_params(i)) return false;
  }
  return true;
}

void GpuForward::fork_prefetch(int n, int layer) {
  const int next = layer + 1;
  if (!pass_.prefetch || next >= w_.config.num_layers ||
      !planner_->selects_in(next, pass_.policies, pass_.dense_policies))
    return;
  const ModelConfig& c = w_.config;
  const GpuLayer& L = w_.layers[size_t(next)];
  const InputLayout in(opt_.max_rows);
  const int set = next % 2;  // the branch's stream and buffers (by parity: two may be in flight)
  cudaStream_t s = prefetch_stream_[set];
  uint16_t *h = guess_h_[set].data(), *q = guess_q_[set].data();
  check(cudaEventRecord(prefetch_fork_, stream_), "cudaEventRecord");
  check(cudaStreamWaitEvent(s, prefetch_fork_), "cudaStreamWaitEvent");
  cuda::add_rmsnorm(x_.data(), nullptr, L.attn_norm.data(), h, n, c.hidden_size, c.rms_norm_eps, s);
  check(cudaEventRecord(prefetch_read_, s), "cudaEventRecord");
  read_pending_ = true;
  // The query rows of the fused projection (its first q_dim rows), then RoPE at each row's position.
  guess_gemm_[set]->linear(h, L.wqkv.data.data(), c.q_dim(), c.hidden_size, guess_qkv_[set].data(), n, s);
  QkvRopeAppendArgs qa;
  qa.qkv = guess_qkv_[set].data();
  qa.bias = L.qkv_bias.size() ? L.qkv_bias.data() : nullptr;
  qa.q_norm = L.q_norm.size() ? L.q_norm.data() : nullptr;
  qa.eps = c.rms_norm_eps;
  qa.inv_freq = w_.inv_freq.data();
  qa.positions = inputs_.data() + in.positions;
  qa.n = n;
  qa.num_heads = c.num_heads;
  qa.num_kv_heads = c.num_kv_heads;
  qa.head_dim = c.head_dim;
  qa.page_size = cache_.shape().page_size;
  qa.q = q;  // no pools: q alone
  cuda::qkv_rope_append(qa, s);
  const int32_t* table = inputs_.data() + in.table;
  const DevicePlan plan =
      planner_->guess(PlanInput{next, n, pass_.max_seq_len, q, cache_.kmin(next), cache_.kmax(next), table,
                                inputs_.data() + in.seq_lens, inputs_.data() + in.plan_policy, pass_.policies,
                                pass_.dense_policies},
                      set, s);
  if (plan.per_kv_head) host_kv_->prefetch_layer(next, n, plan.table, plan.lens, cache_, s);
  // Layer l + 1's branch is forked before layer l's is joined (at layer l's map, after its input
  // norm): a stream, buffers and an event each, by parity.
  check(cudaEventRecord(prefetch_join_[set], s), "cudaEventRecord");
  join_pending_[set] = next;
}

void GpuForward::wait_prefetch_read() {
  if (!read_pending_) return;
  check(cudaStreamWaitEvent(stream_, prefetch_read_), "cudaStreamWaitEvent");
  read_pending_ = false;
}

void GpuForward::join_prefetch(int layer, cudaStream_t stream) {
  if (join_pending_[layer % 2] != layer) return;
  check(cudaStreamWaitEvent(stream, prefetch_join_[layer % 2]), "cudaStreamWaitEvent");
  join_pending_[layer % 2] = -1;
}

std::map<std::string, double> GpuForward::counters() const {
  if (!host_kv_) return {};
  const HostKVSlots::Totals t = host_kv_->totals(stream_);
  return {{"host_kv.pages_copied", double(t.copies)},
          {"host_kv.page_hits", double(t.hits)},
          {"host_kv.pages_copied_ahead", double(t.prefetched)}};
}

void GpuForward::destroy_prefetch() {
  for (cudaEvent_t e : {prefetch_fork_, prefetch_read_, prefetch_join_[0], prefetch_join_[1]})
    if (e) cudaEventDestroy(e);
  for (cudaStream_t s : prefetch_stream_)
    if (s) cudaStreamDestroy(s);
}

}  // namespace skim::cuda
