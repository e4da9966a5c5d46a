// The ops of a Llama-family layer, as a backend implements them: the CPU one (fp32, the
// reference: model/forward.h's CpuForward) and the CUDA one (bf16, cuBLAS, own kernels:
// backend/cuda/gpu_forward.h's GpuForward). The forward pass is written once over them
// (model/llama_forward.h), as llama.cpp writes its models over ggml's backend and llm.c keeps
// train_gpt2.c and .cu in the same shape.
//
// A backend owns the activations of a pass (n rows: a prefill chunk, decode steps of several
// sequences, or both) and the batch's inputs (tokens, positions, page tables, the attention
// policy), staged before the pass runs. The ops name the activations they read and write:
//
//   x        the residual stream [n][hidden]
//   y        a sublayer's output, added into x by the next add_rmsnorm [n][hidden]
//   h        the normed stream, input of the projections [n][hidden]
//   q, k, v  the projections (k and v go into the paged cache) [n][heads][head_dim]
//   attn     the attention output [n][q_dim]
//   gate, up, inter   the MLP [n][intermediate]
//   logits   [n_logits][vocab], the rows the batch asks for
//
// Each backend lays these out its own way (the CUDA one keeps q|k|v and gate|up fused, and h,
// attn, inter in bf16); the forward pass never touches them, only names the ops in order.
#pragma once

namespace skim {

enum class Projection {
  qkv,      // h -> q, k, v (plus the attention bias where the model has one)
  o,        // attn -> y
  gate_up,  // h -> gate, up
  down,     // inter -> y
};

enum class NormWeight { attn, mlp, final };

class Backend {
 public:
  virtual ~Backend() = default;

  // x[r] = the embedding of row r's token.
  virtual void embed(int n) = 0;
  // x += y when `residual` (y holds the last sublayer's output), then h = rmsnorm(x) * weight
  // (the layer's attention or MLP norm, or the final norm; layer is ignored for the final one).
  virtual void add_rmsnorm(int n, int layer, NormWeight weight, bool residual) = 0;
  virtual void linear(int n, int layer, Projection p) = 0;
  // q/k RMSNorm where the model has it, RoPE on q and k at the rows' positions (the pre-RoPE q
  // is kept for the policies that match queries), then k and v written into the paged cache
  // at the rows' positions, with the pages' key digests.
  virtual void qkv_rope_append(int n, int layer) = 0;
  // attn = attention of q over the paged cache, as the pass's policy decides.
  virtual void attention(int n, int layer) = 0;
  // inter = silu(gate) * up
  virtual void silu_mul(int n) = 0;
  // y = the sum of y over the tensor-parallel ranks: the row-parallel projections (o, down)
  // leave each rank a partial sum. Nothing on one rank.
  virtual void all_reduce(int n) = 0;
  // logits = h[logits rows] * W_out^T (the rows the batch asks for, in its order).
  virtual void logits(int n_logits) = 0;
};

}  // namespace skim
