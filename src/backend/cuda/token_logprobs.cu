// Token log-probabilities kernel (see token_logprobs.cuh).
#include "backend/cuda/token_logprobs.cuh"

#include <cfloat>
#include <cstdint>

#include "backend/cuda/block_reduce.cuh"

namespace skim::cuda {

namespace {

constexpr int kThreads = 256;

// A logit's rank key: larger logits first, then lower ids (the CPU reference's order).
__device__ __forceinline__ uint64_t rank_key(float f, int id) {
  const uint32_t b = __float_as_uint(f);
  const uint32_t ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);  // monotone in f
  return uint64_t(ordered) << 32 | uint32_t(0x7fffffff - id);
}

// The best n keys of this thread's slice, best first.
struct ThreadTop {
  uint64_t key[kMaxTopLogprobs];
  int n = 0, size = 0;
  __device__ void offer(uint64_t k) {
    if (size == n && (n == 0 || k <= key[n - 1])) return;
    int i = size < n ? size++ : n - 1;
    for (; i > 0 && key[i - 1] < k; --i) key[i] = key[i - 1];
    key[i] = k;
  }
};

__global__ void __launch_bounds__(kThreads) logprobs_kernel(const TokenLogprobsArgs a) {
  __shared__ float fs[kThreads / 32];
  __shared__ unsigned long long us[kThreads / 32];
  const int r = blockIdx.x, n = a.top_n[r];
  if (n < 0) return;
  const float* l = a.logits + size_t(r) * a.vocab;
  float mx = -FLT_MAX;
  for (int i = threadIdx.x; i < a.vocab; i += kThreads) mx = fmaxf(mx, l[i]);
  mx = block_reduce(mx, [](float x, float y) { return fmaxf(x, y); }, fs);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < a.vocab; i += kThreads) sum += __expf(l[i] - mx);
  sum = block_reduce(sum, [](float x, float y) { return x + y; }, fs);
  const float log_z = mx + logf(sum);
  if (threadIdx.x == 0) a.logprob[r] = l[a.tokens[r]] - log_z;

  ThreadTop top;
  top.n = min(n, kMaxTopLogprobs);
  for (int i = threadIdx.x; i < a.vocab && top.n > 0; i += kThreads) top.offer(rank_key(l[i], i));
  int head = 0;  // this thread's best key not yet taken
  for (int k = 0; k < top.n && k < a.vocab; ++k) {
    const unsigned long long mine = head < top.size ? top.key[head] : 0ull;
    const unsigned long long best =
        block_reduce(mine, [](unsigned long long x, unsigned long long y) { return x > y ? x : y; }, us);
    if (best == mine && head < top.size) ++head;  // keys are unique (the id is in them)
    if (threadIdx.x == 0) {
      const int id = 0x7fffffff - int(uint32_t(best));
      a.top_ids[size_t(r) * kMaxTopLogprobs + k] = id;
      a.top_logprobs[size_t(r) * kMaxTopLogprobs + k] = l[id] - log_z;
    }
  }
}

}  // namespace

cudaError_t token_logprobs(const TokenLogprobsArgs& a, cudaStream_t stream) {
  if (a.rows < 0 || a.vocab <= 0) return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  logprobs_kernel<<<a.rows, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace skim::cuda
