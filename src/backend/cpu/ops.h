// CPU kernels of the forward pass, fp32. Each is the reference its CUDA twin (same name,
// same arguments, in src/backend/cuda/) is tested against. Rows are independent tokens.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace skim::cpu {

// out[r] = x[r] / rms(x[r]) * w, n rows of dim elements; out may alias x.
void rmsnorm(const float* x, const float* w, float* out, int n, int dim, float eps);

// out[n][m] = x[n][k] * W[m][k]^T (+ bias[m] when not null): a Linear layer, W bf16 or fp32.
// Few rows (decode) stream W once through a threaded GEMV; many rows (prefill) split W into
// per-thread panels, each widened to fp32 and multiplied by single-threaded OpenBLAS, so one
// OpenMP pool drives every core and BLAS threads never compete with it.
void linear(const float* x, const Matrix& W, const float* bias, float* out, int n);

// Rotates n rows of `heads` heads of head_dim (HF's rotate_half convention: pairs (i, i+d/2))
// by each row's position. inv_freq has head_dim/2 entries (see rope_inv_freq).
void rope(float* x, const int32_t* positions, const float* inv_freq, int n, int heads, int head_dim);

// out[i] = silu(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, float* out, int64_t count);

// x[i] += y[i]
void add_inplace(float* x, const float* y, int64_t count);

// Tensor parallelism's gathers laid out by row: gathered [ranks][n][stride] (what each rank sent,
// rank g's columns being g * stride + i) -> out [n][width], columns past width dropped. The
// logits' vocabulary slices (width = vocab_size), or a group's query heads (width = ranks x
// stride).
void unpack_vocab_slices(const float* gathered, int ranks, int n, int stride, int width, float* out);

}  // namespace skim::cpu

namespace skim {
// The RoPE inverse frequencies of a config, llama3 scaling applied (host side, once).
void rope_inv_freq(const RopeConfig& rope, int head_dim, float* inv_freq);
}  // namespace skim
