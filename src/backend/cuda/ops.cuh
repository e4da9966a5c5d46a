// The forward pass's small CUDA kernels (everything but the projections, which are cuBLAS,
// and decode attention). Each has a CPU twin in backend/cpu/ops.h (or the KV cache) that the
// parity tests in tests/cuda/ hold it to. Activations are fp32 between kernels; kernels that
// feed a projection write bf16, the GEMM's input type. Asynchronous on `stream`; nothing
// allocates, so every call can be captured into a CUDA graph.
//
// No device code here: plain C++ includes it. bf16 values travel as raw uint16_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/sample_params.h"

namespace skim::cuda {

// x[r] = table[tokens[r]] widened to fp32; table bf16 [vocab][hidden].
void embed(const uint16_t* table, const int32_t* tokens, float* x, int n, int hidden,
           cudaStream_t stream);

// Tensor parallelism's vocabulary split (model/tensor_shard.h). embed_vocab_slice: x[r] = the
// row of tokens[r] when vocab_begin <= tokens[r] < vocab_begin + vocab_rows (table holds those
// rows), else zeros, so the ranks' x summed is embed's. unpack_vocab_slices: the all-gathered
// logits [ranks][n][stride] (rank g's columns are vocabulary ids g * stride + i) laid out as
// logits [n][vocab], the padding past vocab dropped (its reference: cpu::unpack_vocab_slices).
void embed_vocab_slice(const uint16_t* table, const int32_t* tokens, float* x, int n, int hidden, int vocab_begin,
                       int vocab_rows, cudaStream_t stream);
void unpack_vocab_slices(const float* gathered, int ranks, int n, int stride, int vocab, float* logits,
                         cudaStream_t stream);

// The residual add and the RMSNorm before a projection, fused: x += y (when y is not null),
// then out = bf16(x / rms(x) * w). cpu::add_inplace then cpu::rmsnorm.
void add_rmsnorm(float* x, const float* y, const float* w, uint16_t* out, int n, int dim,
                 float eps, cudaStream_t stream);

// out[i] = in[rows[i]], rows of `dim` bf16 values (the rows whose logits are wanted).
void gather_rows(const uint16_t* in, const int32_t* rows, uint16_t* out, int n, int dim,
                 cudaStream_t stream);

// After the fused Q/K/V projection: adds the bias, applies the per-head q/k RMSNorm (Qwen3),
// rotates q and k (RoPE, HF rotate_half pairs (i, i + d/2), fp32 angle position * inv_freq),
// writes q as bf16 for attention and k, v as bf16 into the paged cache at each row's
// position. cpu::rmsnorm, cpu::rope and PagedKVCache::write.
struct QkvRopeAppendArgs {
  const float* qkv = nullptr;     // [n][q_dim + 2 * kv_dim]: q, k, v of each row
  const float* bias = nullptr;    // [q_dim + 2 * kv_dim] or null
  const float* q_norm = nullptr;  // [head_dim] or null
  const float* k_norm = nullptr;  // [head_dim] or null
  float eps = 1e-6f;
  const float* inv_freq = nullptr;   // [head_dim / 2]
  const int32_t* positions = nullptr;  // [n]
  const int32_t* page_table = nullptr;  // [n][max_pages_per_seq]: row r's sequence's pages
  int max_pages_per_seq = 0;  // the rows' stride in page_table; 0: every row reads row 0's (one sequence)
  int n = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 16;
  uint16_t* q = nullptr;       // out: [n][num_heads][head_dim]
  uint16_t* q_pre = nullptr;   // out, optional: q before RoPE (after bias and q_norm), MAC's match
  uint16_t* k_pool = nullptr;  // [num_pages][num_kv_heads][page_size][head_dim]; null: q alone (a guessed
  uint16_t* v_pool = nullptr;  // query, host KV's prefetch: qkv then holds q's columns alone, rows q_dim apart)
};
void qkv_rope_append(const QkvRopeAppendArgs& args, cudaStream_t stream);

// Recomputes the key digest (element-wise min and max over the page's written tokens) of
// every page a row of this batch wrote last: the page of row r holds slots [0, pos % page]
// once row r is written. Digests bf16 [num_pages][num_kv_heads][head_dim] (exact: the keys are
// bf16, so are their minima and maxima; half the bytes of fp32 for the selection). Run after
// qkv_rope_append, so rows writing the same page never race. max_pages_per_seq is the rows'
// stride in page_table (0: every row reads row 0's, as in QkvRopeAppendArgs).
void page_digest(const uint16_t* k_pool, uint16_t* kmin, uint16_t* kmax, const int32_t* positions,
                 const int32_t* page_table, int max_pages_per_seq, int n, int num_kv_heads,
                 int head_dim, int page_size, cudaStream_t stream);

// out[r][i] = bf16(silu(gate_up[r][i]) * gate_up[r][I + i]): the fused gate/up projection's
// output in, the down projection's input out. cpu::silu_mul.
void silu_mul(const float* gate_up, uint16_t* out, int n, int I, cudaStream_t stream);

// y[n][out] = x[n][in] . w[out][in]^T for a few rows (decode), bf16 in, fp32 out (gemv.cu).
// Returns false, launching nothing, for shapes it does not take (more than kGemvMaxRows rows,
// `in` not a multiple of 8): the caller uses cuBLAS then.
constexpr int kGemvMaxRows = 8;
bool gemv(const uint16_t* x, const uint16_t* w, float* y, int n, int out, int in, cudaStream_t stream);
// gemv's two kernels, for tests and benchmarks: kFma, fp32 FMAs with a warp per weight row (or
// two or four); kMma, the tensor cores with the x rows as the MMA's 8 columns. gemv runs kMma
// from kGemvMmaMinRows x rows, and from two where the input has kGemvMmaMinIn or more (below
// that kFma, faster end to end: gemv.cu). On an H100 (bench/gemv_rows.cu,
// bench/results/2026-11-27-h100-gemv-16warps/) a layer of the 8B shape's four projections took
// kMma 157-159 us at any row count, kFma 154.5 at one row, 159-161 at two and three, 164.4 at
// four, 205.7 at eight. Each kernel gives an x row the same sums whatever the other rows, but the
// two differ in rounding: a batch of four or more rounds some projections differently from its rows
// alone.
enum class GemvKernel { kFma, kMma };
constexpr int kGemvMmaMinRows = 4;
constexpr int kGemvMmaMinIn = 8192;  // and from two rows at inputs this long (gemv.cu)
bool gemv_with(const uint16_t* x, const uint16_t* w, float* y, int n, int out, int in, GemvKernel kind,
               cudaStream_t stream);

void to_bf16(const float* in, uint16_t* out, size_t count, cudaStream_t stream);

// next[r] = argmax of logits row r (the first of equal maxima, as std::max_element). When
// `advance` is set, also feeds the token back for the next decode step: tokens[r] = next[r],
// positions[r] += 1, seq_lens[r] += 1 (device-resident greedy decoding).
struct DecodeState {
  int32_t* tokens = nullptr;
  int32_t* positions = nullptr;
  int32_t* seq_lens = nullptr;
};
void argmax(const float* logits, int n, int vocab, int32_t* next, const DecodeState* advance,
            cudaStream_t stream);

// Samples next[r] from logits row r with params[r] (device memory): temperature 0 is argmax,
// else softmax at the temperature, cut to the top_k largest logits and to the nucleus of
// mass top_p as the CPU sampler does, drawn with a uniform number from (seed, step) (sample.cu).
using skim::SampleParams;  // backend/sample_params.h
void sample(const float* logits, int n, int vocab, const SampleParams* params, int32_t* next, cudaStream_t stream);

// Deterministic pseudo-random fill (hash of seed and index), uniform in [-scale, scale]:
// random-weight models and caches for benchmarks, generated on the device.
void fill_random_bf16(uint16_t* p, size_t count, uint64_t seed, float scale, cudaStream_t stream);
void fill_random_f32(float* p, size_t count, uint64_t seed, float scale, cudaStream_t stream);
// Random CSAttention lists for benchmarks: `lists` lists of L entries each, list j holding the
// distinct positions (a i + b) mod context (a odd-coprime step of its own) with random fp16
// scores in [-1, 1].
void fill_random_cs_lists(int32_t* index, uint16_t* score, size_t lists, int L, int context, uint64_t seed,
                          cudaStream_t stream);
// Random page digests: kmin[i] and kmax[i] the smaller and the larger of two such draws, so
// kmin <= kmax as digests of written keys are.
void fill_random_digests(uint16_t* kmin, uint16_t* kmax, size_t count, uint64_t seed, float scale, cudaStream_t stream);
void fill_f32(float* p, size_t count, float value, cudaStream_t stream);

}  // namespace skim::cuda
