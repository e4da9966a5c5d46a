// The Llama-family forward pass on the CPU over a paged KV cache: a batch of rows (a prefill
// chunk, decode tokens of several sequences, or both) goes through every layer at once.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/policy.h"
#include "kv/paged_kv_cache.h"
#include "model/model.h"

namespace skim {

struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<PageTable*> tables;  // per row: its sequence's pages (reserved by the caller)
  std::vector<int> logits_rows;    // rows whose next-token logits are wanted
  bool decode = false;             // every row is a decode step of its sequence
  std::vector<int32_t> retro_step; // RetroAttention: per row, the decode step that first fed it
};

// A backend's forward pass (CpuForward here, cuda::GpuForward on the GPU).
class Forward {
 public:
  virtual ~Forward() = default;
  // Runs the rows through the model, writes their K/V, and fills logits
  // [logits_rows.size()][vocab]. Positions must be reserved in the rows' page tables.
  virtual void run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) = 0;
};

class CpuForward final : public Forward {
 public:
  CpuForward(const Model& model, PagedKVCache& cache);

  void run(const ForwardBatch& batch, AttentionPolicy& policy, std::vector<float>& logits) override;

 private:
  void layer(int l, const ForwardBatch& batch, int n, AttentionPolicy& policy);
  void ensure_capacity(int rows);

  const Model& model_;
  PagedKVCache& cache_;
  // Scratch, grown to the largest batch seen.
  int capacity_ = 0;
  std::vector<float> x_, h_, q_, q_pre_, k_, v_, attn_, gate_, up_, final_;
};

}  // namespace skim
