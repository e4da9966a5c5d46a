#include "attention/mac.h"

#include <algorithm>
#include <cmath>

#include "attention/attend.h"
#include "attention/attention_state.h"
#include "core/error.h"

namespace skim {

namespace {

// Normalised-distance quantile from a histogram of bins of 0.01.
double quantile(const std::vector<uint64_t>& h, double q) {
  uint64_t total = 0;
  for (uint64_t x : h) total += x;
  if (total == 0) return 0;
  uint64_t need = uint64_t(std::ceil(q * double(total))), seen = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    seen += h[i];
    if (seen >= std::max<uint64_t>(need, 1)) return (double(i) + 0.5) * 0.01;
  }
  return double(h.size()) * 0.01;
}

}  // namespace

MacReuse::Ring& MacReuse::ring(const AttentionBatch& b, int row) {
  SeqRings& s = seqs_[b.tables[row]];
  if (s.size() <= size_t(b.layer)) s.resize(size_t(b.layer) + 1);
  return s[size_t(b.layer)];
}

const MacReuse::Ring& MacReuse::ring(const AttentionBatch& b, int row) const {
  return seqs_.at(b.tables[row])[size_t(b.layer)];
}

void MacReuse::push_slot(Ring& r, Slot s) {
  r.push_back(std::move(s));
  while (r.size() > size_t(p_.window)) r.pop_front();
}

MacHeadStats& MacReuse::stat(int layer, int head, int num_heads) {
  if (stats_.size() <= size_t(layer)) {
    stats_.resize(size_t(layer) + 1);
    hist_.resize(size_t(layer) + 1);
  }
  if (stats_[size_t(layer)].empty()) {
    stats_[size_t(layer)].resize(size_t(num_heads));
    hist_[size_t(layer)].assign(kDistBins, 0);
  }
  return stats_[size_t(layer)][size_t(head)];
}

void MacReuse::observe_prefill(const AttentionBatch& b) {
  const size_t width = size_t(b.num_heads) * b.head_dim;
  SKIM_REQUIRE(b.q_pre != nullptr, "policy mac: the batch carries no pre-RoPE queries");
  for (int r = 0; r < b.num_rows; ++r) {
    Ring& ring_r = ring(b, r);
    // Rows already in the ring (a re-run of earlier positions) would break its order: skip.
    if (!ring_r.empty() && b.positions[r] <= ring_r.back().pos) continue;
    Slot s;
    s.pos = b.positions[r];
    s.pending = true;
    s.q_pre.assign(b.q_pre + r * width, b.q_pre + (r + 1) * width);
    s.q.assign(b.q + r * width, b.q + (r + 1) * width);
    push_slot(ring_r, std::move(s));
  }
}

void MacReuse::resolve_pending(const AttentionBatch& b) {
  const int d = b.head_dim, group = b.num_heads / b.num_kv_heads;
  struct Job {
    Slot* slot;
    int row, kv_head;
  };
  std::vector<Job> jobs;
  std::vector<const PageTable*> done;
  for (int r = 0; r < b.num_rows; ++r) {
    if (std::find(done.begin(), done.end(), b.tables[r]) != done.end()) continue;
    done.push_back(b.tables[r]);
    for (Slot& s : ring(b, r)) {
      if (!s.pending) continue;
      s.o.assign(size_t(b.num_heads) * d, 0.0f);
      s.lse.assign(size_t(b.num_heads), kEmptyLse);
      for (int h = 0; h < b.num_kv_heads; ++h) jobs.push_back({&s, r, h});
    }
  }
  // A prefill row's state over [0, p+1-r) with its post-RoPE query: the keys are those the
  // prefill wrote, unchanged since (decode only appends).
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const int end = std::max(0, j.slot->pos + 1 - p_.band);
    KeyRange range{0, end};
    SeqKV kv{b.kv, b.tables[j.row]->pages.data(), j.kv_head};
    const size_t q0 = size_t(j.kv_head) * group;
    attend(j.slot->q.data() + q0 * d, group, kv, std::span<const KeyRange>(&range, end > 0 ? 1 : 0), b.scale,
           j.slot->o.data() + q0 * d, j.slot->lse.data() + q0);
  }
  for (const Job& j : jobs) {
    j.slot->pending = false;
    j.slot->q.clear();
    j.slot->q.shrink_to_fit();
  }
}

MacReuse::Match MacReuse::match(const AttentionBatch& b, int row, int head) {
  const int d = b.head_dim;
  const float* q = b.q_pre + (size_t(row) * b.num_heads + head) * d;
  Match m;
  float best = INFINITY;
  const Ring& r = ring(b, row);
  for (size_t i = 0; i < r.size(); ++i) {
    const float* p = r[i].q_pre.data() + size_t(head) * d;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int k = 0; k < d; ++k) s += (q[k] - p[k]) * (q[k] - p[k]);
    if (s <= best) {  // ties: the most recent entry (a shorter band+tail)
      best = s;
      m.slot = int(i);
    }
  }
  float qn = 0;
  for (int k = 0; k < d; ++k) qn += q[k] * q[k];
  MacHeadStats& st = stat(b.layer, head, b.num_heads);
  st.qnorm += std::sqrt(qn / float(d));
  if (m.slot < 0) return m;
  m.dist = std::sqrt(best);
  m.pos = r[size_t(m.slot)].pos;
  const float norm = std::sqrt(2.0f * float(d));
  m.hit = m.dist < norm * float(1.0 - p_.tau);
  const double x = m.dist / norm;
  st.dist += x;
  hist_[size_t(b.layer)][size_t(std::clamp(int(x / 0.01), 0, kDistBins - 1))] += 1;
  return m;
}

const float* MacReuse::cached_o(const AttentionBatch& b, int row, int slot, int head) const {
  return ring(b, row)[size_t(slot)].o.data() + size_t(head) * b.head_dim;
}

float MacReuse::cached_lse(const AttentionBatch& b, int row, int slot, int head) const {
  return ring(b, row)[size_t(slot)].lse[size_t(head)];
}

void MacReuse::record(int layer, int head, const Match& m, int pos, int num_heads) {
  MacHeadStats& st = stat(layer, head, num_heads);
  st.decisions += 1;
  if (!m.hit) return;
  const int prefix = std::max(0, m.pos + 1 - p_.band);
  st.hits += 1;
  st.skipped += double(prefix) / double(pos + 1);
  st.band_keys += double(pos + 1 - prefix);
}

void MacReuse::push(const AttentionBatch& b, int row, const float* o, const float* lse) {
  const size_t width = size_t(b.num_heads) * b.head_dim;
  Slot s;
  s.pos = b.positions[row];
  s.q_pre.assign(b.q_pre + row * width, b.q_pre + (row + 1) * width);
  s.o.assign(o, o + width);
  s.lse.assign(lse, lse + b.num_heads);
  push_slot(ring(b, row), std::move(s));
}

MacReuse::EntryView MacReuse::newest(const PageTable* t, int layer, int head, int head_dim) const {
  const Ring& r = seqs_.at(t).at(size_t(layer));
  SKIM_REQUIRE(!r.empty() && !r.back().pending, "mac: no computed ring entry");
  return {r.back().pos, r.back().o.data() + size_t(head) * head_dim, r.back().lse[size_t(head)]};
}

int MacReuse::ring_size(const PageTable* t, int layer) const {
  auto it = seqs_.find(t);
  return it == seqs_.end() || it->second.size() <= size_t(layer) ? 0 : int(it->second[size_t(layer)].size());
}

void MacReuse::fork(const PageTable* from, const PageTable* to) {
  auto it = seqs_.find(from);
  if (it != seqs_.end()) seqs_[to] = it->second;
}

void MacReuse::add_counters(std::map<std::string, double>& c) const {
  MacHeadStats all;
  std::vector<uint64_t> hist_all(kDistBins, 0);
  for (size_t l = 0; l < stats_.size(); ++l) {
    MacHeadStats layer;
    for (const MacHeadStats& s : stats_[l]) {
      layer.decisions += s.decisions;
      layer.hits += s.hits;
      layer.skipped += s.skipped;
      layer.band_keys += s.band_keys;
      layer.dist += s.dist;
      layer.qnorm += s.qnorm;
    }
    if (layer.decisions == 0) continue;
    const std::string L = ".L" + std::to_string(l);
    const double n = double(layer.decisions);
    c["mac_hit_rate" + L] = double(layer.hits) / n;
    c["mac_skipped" + L] = layer.skipped / n;
    c["mac_dist_p50" + L] = quantile(hist_[l], 0.5);
    c["mac_qnorm" + L] = layer.qnorm / n;
    all.decisions += layer.decisions;
    all.hits += layer.hits;
    all.skipped += layer.skipped;
    all.band_keys += layer.band_keys;
    all.qnorm += layer.qnorm;
    for (int i = 0; i < kDistBins; ++i) hist_all[size_t(i)] += hist_[l][size_t(i)];
  }
  if (all.decisions == 0) return;
  const double n = double(all.decisions);
  c["mac_hit_rate"] = double(all.hits) / n;
  c["mac_skipped"] = all.skipped / n;
  c["mac_band_keys"] = all.hits ? all.band_keys / double(all.hits) : 0.0;
  c["mac_qnorm"] = all.qnorm / n;
  c["mac_dist_p10"] = quantile(hist_all, 0.1);
  c["mac_dist_p50"] = quantile(hist_all, 0.5);
  c["mac_dist_p90"] = quantile(hist_all, 0.9);
}

}  // namespace skim
