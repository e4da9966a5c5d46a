#include "eval/needle_coverage.h"

#include <algorithm>
#include <cmath>

namespace skim::eval {

namespace {

bool kept(const std::vector<KeyRange>& ranges, int pos) {
  for (KeyRange r : ranges)
    if (pos >= r.begin && pos < r.end) return true;
  return false;
}

// Dense softmax probabilities of one query over keys [0, context).
void dense_probabilities(const float* q, const SeqKV& kv, int d, float scale, int context, std::vector<double>& p) {
  p.resize(size_t(context));
  double top = -INFINITY;
  for (int i = 0; i < context; ++i) {
    const float* k = kv.key(i);
    double s = 0;
    for (int j = 0; j < d; ++j) s += double(q[j]) * k[j];
    p[size_t(i)] = s * scale;
    top = std::max(top, p[size_t(i)]);
  }
  double sum = 0;
  for (double& x : p) sum += (x = std::exp(x - top));
  for (double& x : p) x /= sum;
}

}  // namespace

void LayerCoverage::merge(const LayerCoverage& o) {
  samples += o.samples;
  needle_mass += o.needle_mass;
  kept_needle += o.kept_needle;
  kept_mass += o.kept_mass;
  top_needle += o.top_needle;
  top_kept += o.top_kept;
  steps += o.steps;
}

void NeedleCoverageMeter::attach(AttentionPolicy& policy, TokenSpan needle) {
  needle_ = needle;
  policy.set_selection_observer([this](const AttentionBatch& b, int row, int kv_head,
                                       const std::vector<std::vector<KeyRange>>& heads) {
    on_selection(b, row, kv_head, heads);
  });
  policy.set_observer([this](const AttentionBatch& b) { on_attention(b); });
}

void NeedleCoverageMeter::detach(AttentionPolicy& policy) {
  policy.set_selection_observer({});
  policy.set_observer({});
}

void NeedleCoverageMeter::on_selection(const AttentionBatch& b, int row, int kv_head,
                                       const std::vector<std::vector<KeyRange>>& heads) {
  // A decode step of one sequence: rows are the newest token (and Retro's past rows, whose
  // choices are the newest row's too); the newest row's is the one measured.
  if (row == b.num_rows - 1) chosen_[kv_head] = heads;
}

void NeedleCoverageMeter::on_attention(const AttentionBatch& b) {
  if (!b.decode) return;
  if (layers_.size() <= size_t(b.layer)) layers_.resize(size_t(b.layer) + 1);
  LayerCoverage& L = layers_[size_t(b.layer)];
  const int r = b.num_rows - 1, d = b.head_dim, group = b.num_heads / b.num_kv_heads;
  const int context = b.positions[r] + 1;
  const int nb = std::clamp(needle_.begin, 0, context), ne = std::clamp(needle_.end, nb, context);
  std::vector<double> p;
  double top = -1, top_kept = 0;
  for (int h = 0; h < b.num_heads; ++h) {
    const int g = h / group;
    SeqKV kv{b.kv, b.tables[r]->pages.data(), g};
    dense_probabilities(b.q + (size_t(r) * b.num_heads + h) * d, kv, d, b.scale, context, p);
    auto it = chosen_.find(g);
    const std::vector<KeyRange>* sel = nullptr;  // none: a dense layer, every key kept
    if (it != chosen_.end()) sel = &it->second[it->second.size() == 1 ? 0 : size_t(h % group)];
    double needle = 0, needle_kept = 0, all_kept = 0;
    for (int i = 0; i < context; ++i) {
      const bool in = !sel || kept(*sel, i);
      if (in) all_kept += p[size_t(i)];
      if (i >= nb && i < ne) {
        needle += p[size_t(i)];
        if (in) needle_kept += p[size_t(i)];
      }
    }
    L.samples += 1;
    L.needle_mass += needle;
    L.kept_needle += needle_kept;
    L.kept_mass += all_kept;
    if (needle > top) {
      top = needle;
      top_kept = needle > 0 ? needle_kept / needle : 1.0;
    }
  }
  L.steps += 1;
  L.top_needle += std::max(top, 0.0);
  L.top_kept += top_kept;
  chosen_.clear();
}

void NeedleCoverageMeter::merge(const NeedleCoverageMeter& o) {
  if (o.layers_.size() > layers_.size()) layers_.resize(o.layers_.size());
  for (size_t l = 0; l < o.layers_.size(); ++l) layers_[l].merge(o.layers_[l]);
}

}  // namespace skim::eval
