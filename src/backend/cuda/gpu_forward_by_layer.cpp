// A prompt layer by layer on the GPU (KV beyond GPU memory, issue 18; docs/design.md "KV beyond
// GPU memory", point 4). Chunk by chunk, each chunk's attention reads its whole prefix, which in
// host memory would cross PCIe once per chunk: 8.8 TB for a 512K prompt of the 8B shape. Layer
// by layer, layer l's K/V live in a device pool while every chunk runs layer l (the prefix's
// pages copied in first), and go to the host pool once after; between layers the prompt's
// residual stream waits on the device (x with the MLP's y added: what the next layer's norm
// would add). The same kernels in the same order per chunk and layer as run(): the same values.
#include <algorithm>
#include <vector>

#include "backend/cuda/gpu_forward.h"
#include "backend/cuda/gpu_inputs.h"
#include "backend/cuda/prompt_by_layer.cuh"
#include "model/llama_forward.h"

namespace skim::cuda {

namespace {

// pass_k_/pass_v_ set for a scope: the pass's ops read and write the device's layer pools.
struct LayerPools {
  uint16_t *&k, *&v;
  LayerPools(uint16_t*& pk, uint16_t*& pv, uint16_t* lk, uint16_t* lv) : k(pk), v(pv) { k = lk, v = lv; }
  ~LayerPools() { k = v = nullptr; }
  LayerPools(const LayerPools&) = delete;
  LayerPools& operator=(const LayerPools&) = delete;
};

}  // namespace

bool GpuForward::runs_prompts_by_layer(int index) const {
  return host_kv_ && !opt_.shard && !planner_->cs_params(index) && !planner_->mac_rule(index);
}

void GpuForward::run_by_layer(std::span<const ForwardBatch> chunks, std::vector<std::vector<float>>& logits) {
  const ModelConfig& c = w_.config;
  const KVCacheShape& sh = cache_.shape();
  const size_t H = size_t(c.hidden_size);
  SKIM_REQUIRE(host_kv_ && !chunks.empty() && !chunks[0].tables.empty(), "internal: run_by_layer without host KV");
  PageTable* table = chunks[0].tables[0];
  const int first = chunks[0].positions[0];
  int rows = 0;
  for (const ForwardBatch& b : chunks) {  // one sequence's consecutive rows, chunk after chunk
    require_rows(b);
    const int n = int(b.tokens.size());
    for (int r = 0; r < n; ++r)
      SKIM_REQUIRE(!b.decode && b.tables[size_t(r)] == table && b.positions[size_t(r)] == first + rows + r,
                   "internal: run_by_layer takes one sequence's consecutive prompt rows");
    rows += n;
  }
  const int ps = sh.page_size, end = first + rows;
  SKIM_REQUIRE((end + ps - 1) / ps <= int(table->pages.size()), "GPU forward: the prompt's pages are not reserved");
  // The sequence's pages before the prompt (the prefix its chunks attend) and those it writes.
  const std::vector<int32_t> prefix(table->pages.begin(), table->pages.begin() + (first + ps - 1) / ps);
  const std::vector<int32_t> written(table->pages.begin() + first / ps, table->pages.begin() + (end + ps - 1) / ps);
  check(cudaStreamSynchronize(stream_), "forward pass");  // the page lists and pools below may move
  if (!prefix.empty()) upload(prefix_pages_, prefix.data(), prefix.size());
  upload(prompt_pages_, written.data(), written.size());
  const size_t page_elems = size_t(sh.num_kv_heads) * ps * sh.head_dim, pool = size_t(sh.num_pages) * page_elems;
  if (layer_k_.size() < pool) {
    layer_k_.resize(pool);
    layer_v_.resize(pool);
  }
  if (prompt_x_.size() < size_t(rows) * H) prompt_x_.resize(size_t(rows) * H);
  // Each chunk's inputs staged once (one page table: Pass::one_table), kept on the device.
  const size_t staged = InputLayout(opt_.max_rows).table + size_t(opt_.max_pages_per_seq);
  if (prompt_inputs_.size() < chunks.size() * staged) prompt_inputs_.resize(chunks.size() * staged);
  std::vector<Pass> passes;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const ForwardBatch& b = chunks[ci];
    const uint32_t present = stage(b.tables, b.tokens, b.positions, b.logits_rows, b.policy, {}, /*one_table=*/true);
    passes.push_back(Pass{.max_seq_len = 1 + b.positions.back(), .gather = true, .chunk = true, .seqs = 1,
                          .decode = false, .policies = present, .one_table = true});
    check(cudaMemcpyAsync(prompt_inputs_.data() + ci * staged, inputs_.data(), staged * sizeof(int32_t),
                          cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (chunk inputs)");
    check(cudaStreamSynchronize(stream_), "staging a prompt's chunks");  // staging_ is the next chunk's
  }
  const LayerPools pools(pass_k_, pass_v_, layer_k_.data(), layer_v_.data());
  auto stage_chunk = [&](size_t ci) {
    check(cudaMemcpyAsync(inputs_.data(), prompt_inputs_.data() + ci * staged, staged * sizeof(int32_t),
                          cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (chunk inputs)");
    pass_ = passes[ci];
  };
  for (int l = 0; l < c.num_layers; ++l) {
    check(copy_pool_pages(cache_.k(l), layer_k_.data(), prefix_pages_.data(), int(prefix.size()), page_elems, stream_),
          "copy_pool_pages (prefix K)");
    check(copy_pool_pages(cache_.v(l), layer_v_.data(), prefix_pages_.data(), int(prefix.size()), page_elems, stream_),
          "copy_pool_pages (prefix V)");
    for (size_t ci = 0, r0 = 0; ci < chunks.size(); r0 += chunks[ci].tokens.size(), ++ci) {
      const int n = int(chunks[ci].tokens.size());
      stage_chunk(ci);
      float* saved = prompt_x_.data() + r0 * H;
      if (l == 0) {
        embed(n);
      } else {  // the stream as the last layer left it, y already added (the norm adds zeros)
        check(cudaMemcpyAsync(x_.data(), saved, size_t(n) * H * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
              "cudaMemcpyAsync (prompt stream)");
        check(cudaMemsetAsync(y_.data(), 0, size_t(n) * H * sizeof(float), stream_), "cudaMemsetAsync (y)");
      }
      llama_layer(*this, l, n);
      check(fold_residual(x_.data(), y_.data(), saved, size_t(n) * H, stream_), "fold_residual");
    }
    // Layer l's pages of the prompt to the host pool, once (the partial first page with them:
    // its earlier rows came in with the prefix).
    check(copy_pool_pages(layer_k_.data(), cache_.k(l), prompt_pages_.data(), int(written.size()), page_elems, stream_),
          "copy_pool_pages (prompt K)");
    check(copy_pool_pages(layer_v_.data(), cache_.v(l), prompt_pages_.data(), int(written.size()), page_elems, stream_),
          "copy_pool_pages (prompt V)");
  }
  // The logits rows: each chunk's final norm over its saved stream.
  logits.assign(chunks.size(), {});
  for (size_t ci = 0, r0 = 0; ci < chunks.size(); r0 += chunks[ci].tokens.size(), ++ci) {
    const int nl = int(chunks[ci].logits_rows.size()), n = int(chunks[ci].tokens.size());
    if (nl == 0) continue;
    stage_chunk(ci);
    check(cudaMemcpyAsync(x_.data(), prompt_x_.data() + r0 * H, size_t(n) * H * sizeof(float), cudaMemcpyDeviceToDevice,
                          stream_),
          "cudaMemcpyAsync (prompt stream)");
    add_rmsnorm(n, c.num_layers, NormWeight::final, /*residual=*/false);
    this->logits(nl);
    logits[ci].resize(size_t(nl) * c.vocab_size);
    check(cudaMemcpyAsync(logits[ci].data(), logits_.data(), logits[ci].size() * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_),
          "cudaMemcpyAsync (logits)");
    check(cudaStreamSynchronize(stream_), "forward pass");  // the next chunk's logits reuse the buffer
  }
  host_kv_->invalidate(stream_);  // the prompt wrote pages no map saw
  check(cudaStreamSynchronize(stream_), "forward pass");
}

}  // namespace skim::cuda
