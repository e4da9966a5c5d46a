// Tensor parallelism's split of a model over `size` ranks (issue 19; Megatron-LM's layout):
// query heads by KV group, with their KV heads, cache and policy state; q/k/v and gate/up
// column-parallel (a rank computes its heads' and its MLP columns' outputs), o and down
// row-parallel (a rank's partial sums, all-reduced), the embedding and the LM head by vocabulary
// (an all-reduce of the embedded rows, an all-gather of the logits).
//
// With more ranks than KV heads a KV head is replicated on the size / num_kv_heads ranks that
// share its group (as vLLM does). Those ranks gather the group's queries (an all-gather of q
// among them) and each attends the whole group, keeping its own heads' outputs: a policy that
// selects per GQA group (gbsa's pooled query, ReSA, ART's group stop, CS's tables) then sees the
// group exactly as on one rank, and the KV bytes each rank reads are its head's, once.
#pragma once

#include <memory>

#include "model/model.h"

namespace skim {

struct TensorShard {
  int rank = 0, size = 1;
  int q_head_begin = 0, q_heads = 0;        // query heads it projects and outputs (its o columns)
  int kv_head_begin = 0, kv_heads = 0;      // KV heads it holds: cache, digests, policy state
  int attn_head_begin = 0, attn_heads = 0;  // query heads it attends: its own, or its KV head's
                                            // whole group when the KV head is replicated
  int kv_group_ranks = 1;                   // ranks holding its KV heads (replicas), >= 1
  int inter_begin = 0, inter = 0;           // MLP columns (gate/up rows, down columns)
  int vocab_begin = 0, vocab = 0;           // embedding and LM head rows
  int vocab_stride = 0;                     // every rank's vocab slice padded to this (all-gather)

  bool replicated() const { return kv_group_ranks > 1; }
  // Where its own heads sit among the heads it attends.
  int own_head_offset() const { return q_head_begin - attn_head_begin; }
};

// Rank `rank`'s share of `config`. Throws skim::Error naming --tp when the heads do not split:
// num_attention_heads must divide by size, and num_key_value_heads by size or size by it.
TensorShard plan_tensor_shard(const ModelConfig& config, int rank, int size);

// The weights rank `shard` holds (copies of the full model's slices) and a config of its shape:
// num_heads = attn_heads, num_kv_heads = kv_heads, intermediate_size = inter; the vocabulary
// stays the full one (token ids are the model's). The embedding and LM head slices are padded
// with zero rows to vocab_stride, so every rank's logits are [n][vocab_stride] (the gather's
// equal counts).
std::unique_ptr<Model> shard_model(const Model& full, const TensorShard& shard);
// The config shard_model gives the rank (its shape, for random weights of it).
ModelConfig shard_config(const ModelConfig& full, const TensorShard& shard);

}  // namespace skim
