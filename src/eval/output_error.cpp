#include "eval/output_error.h"

#include <algorithm>
#include <cmath>

#include "eval/work.h"

namespace skim::eval {

void OutputErrorMeter::attach(AttentionPolicy& policy) {
  policy.set_observer([this](const AttentionBatch& b) { record(b); });
}

void OutputErrorMeter::record(const AttentionBatch& b) {
  if (!b.decode) return;  // prefill and rectification chunks are dense by construction
  double t0 = now_seconds();
  const size_t width = size_t(b.head_dim);
  dense_.resize(size_t(b.num_rows) * b.num_heads * width);
  attend_dense(b, dense_.data());
  if (size_t(b.layer) >= errors_.size()) errors_.resize(size_t(b.layer) + 1);
  std::vector<float>& out = errors_[size_t(b.layer)];
  for (int r = 0; r < b.num_rows; ++r)
    for (int h = 0; h < b.num_heads; ++h) {
      const size_t at = (size_t(r) * b.num_heads + h) * width;
      double diff = 0, ref = 0;
      for (size_t i = 0; i < width; ++i) {
        double d = double(b.out[at + i]) - dense_[at + i];
        diff += d * d;
        ref += double(dense_[at + i]) * dense_[at + i];
      }
      out.push_back(ref > 0 ? float(std::sqrt(diff / ref)) : float(std::sqrt(diff)));
    }
  seconds_ += now_seconds() - t0;
}

std::vector<LayerError> OutputErrorMeter::per_layer() const {
  std::vector<LayerError> layers;
  for (const std::vector<float>& e : errors_) {
    LayerError l;
    l.samples = e.size();
    if (!e.empty()) {
      double sum = 0;
      for (float x : e) sum += x;
      l.mean = sum / double(e.size());
      std::vector<float> sorted = e;
      size_t k = std::min(sorted.size() - 1, size_t(std::ceil(0.9 * double(sorted.size()))) - 1);
      std::nth_element(sorted.begin(), sorted.begin() + long(k), sorted.end());
      l.p90 = sorted[k];
    }
    layers.push_back(l);
  }
  return layers;
}

double OutputErrorMeter::mean() const {
  double sum = 0;
  size_t n = 0;
  for (const std::vector<float>& e : errors_) {
    for (float x : e) sum += x;
    n += e.size();
  }
  return n ? sum / double(n) : 0;
}

void OutputErrorMeter::merge(const OutputErrorMeter& other) {
  if (other.errors_.size() > errors_.size()) errors_.resize(other.errors_.size());
  for (size_t l = 0; l < other.errors_.size(); ++l)
    errors_[l].insert(errors_[l].end(), other.errors_[l].begin(), other.errors_[l].end());
  seconds_ += other.seconds_;
}

}  // namespace skim::eval
