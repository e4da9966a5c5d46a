#include "attention/mac.h"

#include <algorithm>
#include <cmath>

#include "attention/mac_decode_args.h"
#include "attention/attention_state.h"
#include "core/error.h"
#include "attention/policy_registry.h"

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

MacParams mac_params(const PolicyPart& p) {
  MacParams m;
  p.read("window", m.window, "band", m.band, "tau", m.tau, "min_context", m.min_context);
  return m;
}

MacReuse::Ring& MacReuse::ring(const AttentionBatch& b, int row) {
  SeqRings& s = seqs_[b.tables[row]];
  if (s.size() <= size_t(b.layer)) s.resize(size_t(b.layer) + 1);
  Ring& r = s[size_t(b.layer)];
  if (r.width == 0) {
    r.heads = b.num_heads;
    r.width = b.num_heads * b.head_dim;
    reserve(r);
  }
  return r;
}

const MacReuse::Ring& MacReuse::ring(const AttentionBatch& b, int row) const {
  return seqs_.at(b.tables[row])[size_t(b.layer)];
}

void MacReuse::reserve(Ring& r) const {
  const size_t K = size_t(p_.window);
  r.pos.reserve(K);
  r.q_pre.reserve(K * size_t(r.width));
  r.o.reserve(K * size_t(r.width));
  r.lse.reserve(K * size_t(r.heads));
}

void MacReuse::push_entry(Ring& r, int pos, const float* q_pre, const float* o, const float* lse) {
  const size_t w = size_t(r.width);
  size_t slot;
  if (r.size() < p_.window) {  // filling: append within the reserved capacity
    slot = size_t(r.size());
    r.pos.push_back(pos);
    r.q_pre.resize(r.q_pre.size() + w);
    r.o.resize(r.o.size() + w);
    r.lse.resize(r.lse.size() + size_t(r.heads));
  } else {  // full: the oldest entry makes room
    slot = size_t(r.first);
    r.first = (r.first + 1) % p_.window;
    r.pos[slot] = pos;
  }
  std::copy_n(q_pre, w, r.q_pre.data() + slot * w);
  std::copy_n(o, w, r.o.data() + slot * w);
  std::copy_n(lse, r.heads, r.lse.data() + slot * size_t(r.heads));
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

void MacReuse::observe_prefill(const AttentionBatch& b, const float* prefix_o, const float* prefix_lse) {
  const size_t width = size_t(b.num_heads) * b.head_dim;
  SKIM_REQUIRE(b.q_pre != nullptr, "policy mac: the batch carries no pre-RoPE queries");
  for (int r = 0; r < b.num_rows; ++r) {
    Ring& ring_r = ring(b, r);
    // Rows already in the ring (a re-run of earlier positions) would break its order: skip.
    if (ring_r.size() > 0 && b.positions[r] <= ring_r.pos[size_t(ring_r.slot(ring_r.size() - 1))]) continue;
    push_entry(ring_r, b.positions[r], b.q_pre + r * width, prefix_o + r * width, prefix_lse + size_t(r) * b.num_heads);
  }
}

bool MacReuse::match(const AttentionBatch& b, int row, Match* out) {
  const int d = b.head_dim, H = b.num_heads;
  for (int h = 0; h < H; ++h) out[h] = Match{};
  if (b.positions[row] + 1 < p_.min_context) return false;
  const float* q = b.q_pre + size_t(row) * H * d;
  const Ring& r = ring(b, row);
  std::vector<float>& best = best_;  // per head; reused so that a decode step allocates nothing
  best.assign(size_t(H), INFINITY);
  // Oldest to newest, each entry's heads together (one contiguous read of the ring).
  for (int i = 0; i < r.size(); ++i) {
    const int slot = r.slot(i);
    const float* e = r.q_pre.data() + size_t(slot) * r.width;
    for (int h = 0; h < H; ++h) {
      const float* qh = q + size_t(h) * d;
      const float* eh = e + size_t(h) * d;
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int k = 0; k < d; ++k) s += (qh[k] - eh[k]) * (qh[k] - eh[k]);
      if (s <= best[size_t(h)]) {  // ties: the most recent entry (a shorter band+tail)
        best[size_t(h)] = s;
        out[h].slot = slot;
      }
    }
  }
  const float norm = std::sqrt(2.0f * float(d));
  for (int h = 0; h < H; ++h) {
    const float* qh = q + size_t(h) * d;
    float qn = 0;
    for (int k = 0; k < d; ++k) qn += qh[k] * qh[k];
    MacHeadStats& st = stat(b.layer, h, H);
    st.qnorm += std::sqrt(qn / float(d));
    Match& m = out[h];
    if (m.slot < 0) continue;
    m.dist = std::sqrt(best[size_t(h)]);
    m.pos = r.pos[size_t(m.slot)];
    m.prefix = prefix_end(m.pos, b.kv.page_size);
    m.hit = m.dist < norm * float(1.0 - p_.tau);
    const double x = m.dist / norm;
    st.dist += x;
    hist_[size_t(b.layer)][size_t(std::clamp(int(x / 0.01), 0, kDistBins - 1))] += 1;
  }
  return true;
}

const float* MacReuse::cached_o(const AttentionBatch& b, int row, int slot, int head) const {
  const Ring& r = ring(b, row);
  return r.o.data() + size_t(slot) * r.width + size_t(head) * b.head_dim;
}

float MacReuse::cached_lse(const AttentionBatch& b, int row, int slot, int head) const {
  const Ring& r = ring(b, row);
  return r.lse[size_t(slot) * r.heads + head];
}

void MacReuse::record(int layer, int head, const Match& m, int pos, int num_heads) {
  MacHeadStats& st = stat(layer, head, num_heads);
  st.decisions += 1;
  if (!m.hit) return;
  const int prefix = m.prefix;
  st.hits += 1;
  st.skipped += double(prefix) / double(pos + 1);
  st.band_keys += double(pos + 1 - prefix);
}

int MacReuse::prefix_end(int pos, int page_size) const { return mac_prefix_end(pos, p_.band, page_size); }

void MacReuse::push(const AttentionBatch& b, int row, const float* o, const float* lse) {
  const size_t width = size_t(b.num_heads) * b.head_dim;
  push_entry(ring(b, row), b.positions[row], b.q_pre + row * width, o, lse);
}

MacReuse::EntryView MacReuse::entry(const PageTable* t, int layer, int i, int head, int head_dim) const {
  const Ring& r = seqs_.at(t).at(size_t(layer));
  SKIM_REQUIRE(i >= 0 && i < r.size(), "mac: no ring entry {}", i);
  const size_t slot = size_t(r.slot(i));
  return {r.pos[slot], r.o.data() + slot * r.width + size_t(head) * head_dim, r.lse[slot * r.heads + head]};
}

int MacReuse::ring_size(const PageTable* t, int layer) const {
  auto it = seqs_.find(t);
  return it == seqs_.end() || it->second.size() <= size_t(layer) ? 0 : it->second[size_t(layer)].size();
}

void MacReuse::fork(const PageTable* from, const PageTable* to) {
  auto it = seqs_.find(from);
  if (it == seqs_.end()) return;
  SeqRings& copy = seqs_[to] = it->second;
  for (Ring& r : copy)  // a copy holds only the entries: reserve the rest of its K again
    if (r.width > 0) reserve(r);
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

PolicyInfo mac_policy_info() {
  const MacParams m;
  return {.name = "mac",
          .summary = "MAC-Attention: reuse the cached prefix state of a similar recent query; recompute a band plus the tail",
          .stage = PolicyStage::Reuse,
          .keys = {integer_key("window", m.window, 1, 1 << 20, "K: ring entries per sequence, layer and query head"),
                   integer_key("band", m.band, 0, kNoUpperBound, "r: keys before the matched position recomputed"),
                   unit_key("tau", m.tau, "match threshold: hit when the pre-RoPE distance is below sqrt(2d)(1-tau)"),
                   integer_key("min_context", m.min_context, 0, kNoUpperBound,
                               "rows with a shorter context attend the base without matching (the ring still fills)")},
          .composes_with = {"dense", "streaming", "quest", "oracle", "gbsa", "cs", "art"}, .sequence_state = true,
          .order = "on a hit: band and tail, most recent first", .backends = {"cpu", "cuda"}};
}

}  // namespace skim
