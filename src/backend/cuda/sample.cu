// Next-token sampling on the device, one block per row: the CPU sampler's rule
// (engine/sampler.cpp) without sorting. Temperature 0 is argmax. Otherwise the top-k cut and
// the nucleus are thresholds on the logits' ordered bit patterns: top-k keeps logits >= the
// k-th largest (a radix select, exact), the nucleus keeps the largest logits whose softmax
// mass reaches top_p (a bisection, over a few thousand candidates in shared memory when they
// hold it: 32 passes over a 128K vocabulary took one SM about 0.1 ms a threshold). Then one uniform draw
// from (seed, step) picks a kept token by the mass before it in vocabulary order (the CPU
// draws in rank order from its own generator: same distribution, different stream).
#include <cfloat>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/ops.cuh"
#include "backend/cuda/row_max.cuh"

namespace skim::cuda {

namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint32_t order_key(float f) {  // monotone: a < b <=> key(a) < key(b)
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Largest key K with measure(K) >= target, where measure (a count or a mass of the logits
// whose key is >= K) falls as K rises.
template <typename Measure>
__device__ uint32_t bisect_key(Measure measure, float target) {
  uint32_t lo = 0, hi = 0xffffffffu;  // measure(lo) >= target holds
  while (lo < hi) {
    const uint32_t mid = uint32_t(lo + (uint64_t(hi) - lo + 1) / 2);  // 64-bit: hi - lo + 1 overflows
    if (measure(mid) >= target) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Each thread's contiguous slice [begin, end) of a row of n (the draw's and the compaction's
// order: vocabulary order across the threads).
__device__ __forceinline__ void thread_slice(int n, int& begin, int& end) {
  const int per = (n + blockDim.x - 1) / blockDim.x;
  begin = min(n, int(threadIdx.x) * per);
  end = min(n, begin + per);
}

// In place over buf[blockDim.x] (each thread's value at its index): inclusive prefix sums
// (Hillis-Steele, the same order every run).
template <typename T>
__device__ void block_inclusive_scan(T* buf) {
  __syncthreads();
  for (int o = 1; o < int(blockDim.x); o <<= 1) {
    const T v = threadIdx.x >= unsigned(o) ? buf[threadIdx.x - o] : T(0);
    __syncthreads();
    buf[threadIdx.x] += v;
    __syncthreads();
  }
}

// The k-th largest order key of the row (1 <= k <= vocab): exact, as bisect_key over counts
// finds it, in four passes of an 8-bit radix select (integer counts in shared memory: the
// same whatever the order of the adds) instead of 32 passes over the vocabulary.
__device__ uint32_t kth_largest_key(const float* l, int vocab, int k) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t digit, above;
  uint32_t prefix = 0, mask = 0, remaining = uint32_t(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint32_t key = order_key(l[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the digit where the count from the top reaches `remaining`
      uint32_t acc = 0;
      int d = 255;
      for (; d > 0 && acc + hist[d] < remaining; --d) acc += hist[d];
      digit = uint32_t(d), above = acc;
    }
    __syncthreads();
    prefix |= digit << shift;
    mask |= 255u << shift;
    remaining -= above;
    __syncthreads();  // digit and hist are rewritten next pass
  }
  return prefix;
}

// Candidates of the nucleus kept in shared memory: when the logits at or above some key number
// at most this many and hold at least top_p of the mass, the nucleus bisection runs over them
// alone (32 passes over shared memory, not over the vocabulary).
constexpr int kNucleusMax = 4096;

// The row's logits with key >= cut, in vocabulary order (each thread's contiguous slice in turn:
// the same list, and so the same sums, every run) into `out`; returns how many (all of them
// must fit: the caller counted them).
__device__ int compact_kept(const float* l, int vocab, uint32_t cut, float* out) {
  __shared__ int offsets[kThreads];
  int begin, end;
  thread_slice(vocab, begin, end);
  int mine = 0;
  for (int i = begin; i < end; ++i) mine += order_key(l[i]) >= cut;
  offsets[threadIdx.x] = mine;
  block_inclusive_scan(offsets);
  int at = offsets[threadIdx.x] - mine;
  for (int i = begin; i < end; ++i)
    if (order_key(l[i]) >= cut) out[at++] = l[i];
  const int total = offsets[blockDim.x - 1];
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int vocab,
                                                          const SampleParams* params, int32_t* next) {
  __shared__ float fs[32];
  __shared__ int is[32];
  __shared__ uint32_t us[32];
  const float* l = logits + size_t(blockIdx.x) * vocab;
  const SampleParams p = params[blockIdx.x];

  // The maximum and, for greedy decoding, its first index.
  float best;
  int idx;
  thread_row_max(l, vocab, best, idx);
  const float top = block_reduce(best, [](float a, float b) { return fmaxf(a, b); }, fs);
  int first = block_reduce(best == top ? idx : vocab, [](int a, int b) { return min(a, b); }, is);
  if (first >= vocab) first = 0;  // a row of NaNs
  if (p.temperature <= 0.0f) {
    if (threadIdx.x == 0) next[blockIdx.x] = first;
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  auto weight = [&](int i) { return __expf((l[i] - top) * inv_t); };
  auto sum = [&](float v) { return block_reduce(v, [](float a, float b) { return a + b; }, fs); };

  auto count_from = [&](uint32_t k) {  // logits with key >= k
    uint32_t c = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) c += order_key(l[i]) >= k;
    return block_reduce(c, [](uint32_t a, uint32_t b) { return a + b; }, us);
  };
  uint32_t cut = 0;  // keep logits whose key >= cut
  if (p.top_k > 0 && p.top_k < vocab) cut = kth_largest_key(l, vocab, p.top_k);
  float z = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    if (order_key(l[i]) >= cut) z += weight(i);
  z = sum(z);
  if (p.top_p < 1.0f) {
    const float target = p.top_p * z;
    // The candidates: the kept logits, or the kNucleusMax largest of them if that holds the
    // nucleus (ties at their least key may make more: then, or if the mass falls short, the
    // bisection runs over the vocabulary).
    __shared__ float kept[kNucleusMax];
    uint32_t from = cut;
    if (count_from(cut) > uint32_t(kNucleusMax)) from = max(cut, kth_largest_key(l, vocab, kNucleusMax));
    float mass = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
      if (order_key(l[i]) >= from) mass += weight(i);
    const bool small = count_from(from) <= uint32_t(kNucleusMax) && sum(mass) >= target;
    uint32_t nucleus;
    if (small) {
      const int n = compact_kept(l, vocab, from, kept);
      nucleus = bisect_key(
          [&](uint32_t k) {
            float m = 0.0f;
            for (int j = threadIdx.x; j < n; j += blockDim.x)
              if (order_key(kept[j]) >= k) m += __expf((kept[j] - top) * inv_t);
            return sum(m);
          },
          target);
      nucleus = max(nucleus, from);  // below `from` the vocabulary's mass is larger still
    } else {
      nucleus = bisect_key(
          [&](uint32_t k) {
            float m = 0.0f;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x)
              if (order_key(l[i]) >= k && order_key(l[i]) >= cut) m += weight(i);
            return sum(m);
          },
          target);
    }
    cut = max(cut, nucleus);
  }

  // Each thread owns a contiguous slice; the draw lands in one slice's mass.
  int begin, end;
  thread_slice(vocab, begin, end);
  float mine = 0.0f;
  for (int i = begin; i < end; ++i)
    if (order_key(l[i]) >= cut) mine += weight(i);
  __shared__ float prefix[kThreads];
  prefix[threadIdx.x] = mine;
  block_inclusive_scan(prefix);
  const float total = prefix[blockDim.x - 1];
  const double u01 = double(mix64(p.seed ^ mix64(p.step)) >> 11) * (1.0 / 9007199254740992.0);
  const float u = float(u01) * total;
  __shared__ int chosen;
  if (threadIdx.x == 0) chosen = -1;
  __syncthreads();
  const float before = prefix[threadIdx.x] - mine;
  if (mine > 0.0f && u >= before && u < prefix[threadIdx.x]) {
    float acc = before;
    int pick = -1;
    for (int i = begin; i < end; ++i)
      if (order_key(l[i]) >= cut) {
        pick = i;  // the last kept one, should rounding leave u past every step
        acc += weight(i);
        if (u < acc) break;
      }
    chosen = pick;
  }
  __syncthreads();
  if (threadIdx.x == 0) next[blockIdx.x] = chosen >= 0 ? chosen : first;  // u rounded to the total
}

}  // namespace

void sample(const float* logits, int n, int vocab, const SampleParams* params, int32_t* next, cudaStream_t s) {
  if (n > 0) sample_kernel<<<n, kThreads, 0, s>>>(logits, vocab, params, next);
}

}  // namespace skim::cuda
