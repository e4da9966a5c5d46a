#include "backend/cpu/ops.h"

#ifdef SKIM_HAVE_BLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

namespace skim::cpu {

void rmsnorm(const float* x, const float* w, float* out, int n, int dim, float eps) {
#pragma omp parallel for if (n > 4)
  for (int r = 0; r < n; ++r) {
    const float* xr = x + size_t(r) * dim;
    float* o = out + size_t(r) * dim;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
    float inv = 1.0f / std::sqrt(float(ss / dim) + eps);
    for (int i = 0; i < dim; ++i) o[i] = w[i] * (xr[i] * inv);
  }
}

namespace {

constexpr int kGemvRows = 8;    // up to this many input rows take the GEMV path
constexpr int kPanelRows = 64;  // W rows per GEMM panel

// W rows [r0, r0 + count) as fp32: a pointer into W when it is fp32, else widened into buf.
const float* rows_f32(const Matrix& W, int r0, int count, std::vector<float>& buf) {
  const size_t k = size_t(W.cols), at = size_t(r0) * k;
  if (W.dtype == DType::F32) return W.f32.data() + at;
  buf.resize(size_t(count) * k);
  const uint16_t* src = W.bf16.data() + at;
  float* dst = buf.data();
#pragma omp simd
  for (size_t i = 0; i < size_t(count) * k; ++i) dst[i] = std::bit_cast<float>(uint32_t(src[i]) << 16);
  return dst;
}

// Calls fn(r0, count, w) for W's panels of kPanelRows rows [r0, r0 + count), w their fp32
// values, the panels spread over the OpenMP threads.
template <typename F>
void for_each_panel(const Matrix& W, F&& fn) {
#pragma omp parallel
  {
    std::vector<float> buf;
#pragma omp for schedule(static)
    for (int r0 = 0; r0 < W.rows; r0 += kPanelRows) {
      const int count = std::min(kPanelRows, W.rows - r0);
      fn(r0, count, rows_f32(W, r0, count, buf));
    }
  }
}

void gemv(const float* x, const Matrix& W, float* out, int n) {
  const int k = W.cols, m = W.rows;
  for_each_panel(W, [&](int r0, int count, const float* w) {
    for (int j = 0; j < count; ++j)
      for (int r = 0; r < n; ++r) {
        const float* xr = x + size_t(r) * k;
        const float* wj = w + size_t(j) * k;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < k; ++i) s += xr[i] * wj[i];
        out[size_t(r) * m + r0 + j] = s;
      }
  });
}

#ifdef SKIM_HAVE_BLAS
void gemm(const float* x, const Matrix& W, float* out, int n) {
  const int k = W.cols, m = W.rows;
  for_each_panel(W, [&](int r0, int count, const float* w) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, count, k, 1.0f, x, k, w, k, 0.0f, out + r0, m);
  });
}
#else
// Built without BLAS (-DSKIM_BLAS=OFF): the GEMV loop serves every row count, slower.
void gemm(const float* x, const Matrix& W, float* out, int n) { gemv(x, W, out, n); }
#endif

}  // namespace

void linear(const float* x, const Matrix& W, const float* bias, float* out, int n) {
  if (n <= kGemvRows) {
    gemv(x, W, out, n);
  } else {
    gemm(x, W, out, n);
  }
  const int m = W.rows;
  if (bias)
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < m; ++j) out[size_t(r) * m + j] += bias[j];
}

void rope(float* x, const int32_t* positions, const float* inv_freq, int n, int heads, int head_dim) {
  const int half = head_dim / 2;
#pragma omp parallel for if (n > 4)
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < half; ++i) {
      // fp32 angle, as transformers computes it (position * inv_freq in fp32), so that long
      // positions round the same way as the oracle.
      float angle = float(positions[r]) * inv_freq[i];
      float c = std::cos(angle), s = std::sin(angle);
      for (int h = 0; h < heads; ++h) {
        float* xh = x + (size_t(r) * heads + h) * head_dim;
        float a = xh[i], b = xh[i + half];
        xh[i] = a * c - b * s;
        xh[i + half] = b * c + a * s;
      }
    }
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t count) {
#pragma omp parallel for simd if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* x, const float* y, int64_t count) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

void unpack_vocab_slices(const float* gathered, int ranks, int n, int stride, int width, float* out) {
  const size_t count = size_t(n) * stride;
  for (int g = 0; g < ranks; ++g) {
    const int begin = std::min(width, g * stride), len = std::min(width, begin + stride) - begin;
    for (int r = 0; r < n; ++r)
      std::copy_n(gathered + size_t(g) * count + size_t(r) * stride, len, out + size_t(r) * width + begin);
  }
}

}  // namespace skim::cpu

namespace skim {

void rope_inv_freq(const RopeConfig& rope, int head_dim, float* inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    float f = 1.0f / std::pow(rope.theta, float(2 * i) / float(head_dim));
    if (rope.type == "llama3") {
      // Llama 3.1: long wavelengths are divided by `factor`, short ones kept, and the band
      // between interpolated smoothly.
      const float pi = 3.14159265358979323846f;
      float low_wavelen = rope.original_max_position_embeddings / rope.low_freq_factor;
      float high_wavelen = rope.original_max_position_embeddings / rope.high_freq_factor;
      float wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f = f / rope.factor;
      } else if (wavelen >= high_wavelen) {
        float smooth = (rope.original_max_position_embeddings / wavelen - rope.low_freq_factor) /
                       (rope.high_freq_factor - rope.low_freq_factor);
        f = (1 - smooth) * f / rope.factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
}

}  // namespace skim
