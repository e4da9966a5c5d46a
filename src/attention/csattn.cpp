#include "attention/csattn.h"

#include <algorithm>
#include <cmath>

#include "attention/kmeans.h"
#include "core/dtype.h"
#include "core/error.h"

namespace skim {

namespace {

float dot(const float* a, const float* b, int n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// ---- TopList ----

float TopList::score(int i) const { return f16_to_f32(score_[size_t(i)]); }

bool TopList::try_insert(int32_t index, float score) {
  if (capacity_ <= 0) return false;
  const uint16_t h = f32_to_f16(score);
  const float s = f16_to_f32(h);  // compare what is stored
  if (int(index_.size()) == capacity_) {
    if (!(s > f16_to_f32(score_.back()))) return false;
    index_.pop_back();
    score_.pop_back();
  }
  // After the entries with a score >= s: descending, ties in arrival order.
  size_t lo = 0, hi = score_.size();
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (f16_to_f32(score_[mid]) >= s) lo = mid + 1; else hi = mid;
  }
  index_.insert(index_.begin() + long(lo), index);
  score_.insert(score_.begin() + long(lo), h);
  return true;
}

// ---- building and streaming ----

void CsSelector::build(GroupTable& g, const SeqKV& kv, int group, int num_keys) {
  const int d = kv.layer.head_dim, M = p_.subspaces, C = p_.centroids, ds = d / M;
  SKIM_REQUIRE(g.num_queries > 0,
               "policy cs: a sequence reached decoding without prompt queries to build its tables "
               "from (cs indexes the prompt during prefill)");
  SKIM_REQUIRE(num_keys > 0, "policy cs: no prompt keys to index");
  const int capacity = p_.list <= 1.0 ? std::max(1, int(std::ceil(p_.list * num_keys))) : int(p_.list);
  // k-means on a strided sample of the (query, head) vectors when there are many.
  const int total = g.num_queries * group;
  const int stride = (total + p_.max_points - 1) / p_.max_points;
  const int n = (total + stride - 1) / stride;

  g.centroids.assign(size_t(M) * C * ds, 0.0f);
  g.lists.assign(size_t(M) * C, TopList(capacity));
  std::vector<float> pts(size_t(n) * ds), keys(size_t(num_keys) * ds);
  for (int m = 0; m < M; ++m) {
    for (int i = 0; i < n; ++i) {
      float* x = pts.data() + size_t(i) * ds;
      std::copy_n(g.queries.data() + size_t(i) * stride * d + size_t(m) * ds, ds, x);
      normalize(x, ds);
    }
    KMeansResult km = cosine_kmeans(pts.data(), n, ds, C, p_.iters, 0x5eed0000u + uint64_t(m));
    std::copy(km.centroids.begin(), km.centroids.end(), g.centroids.begin() + long(size_t(m) * C * ds));
    for (int j = 0; j < num_keys; ++j) {
      float* k = keys.data() + size_t(j) * ds;
      std::copy_n(kv.key(j) + size_t(m) * ds, ds, k);
      if (!p_.score_dot) normalize(k, ds);
    }
#pragma omp parallel
    {
      std::vector<float> score(static_cast<size_t>(num_keys));
      std::vector<int32_t> order(static_cast<size_t>(num_keys));
#pragma omp for schedule(dynamic)
      for (int c = 0; c < C; ++c) {
        const float* cen = g.centroids.data() + (size_t(m) * C + c) * ds;
        for (int j = 0; j < num_keys; ++j) score[size_t(j)] = dot(cen, keys.data() + size_t(j) * ds, ds);
        for (int j = 0; j < num_keys; ++j) order[size_t(j)] = j;
        const int top = std::min(capacity, num_keys);
        std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int32_t a, int32_t b) {
          return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
        });
        TopList& list = g.lists[size_t(m) * C + c];
        for (int t = 0; t < top; ++t) list.try_insert(order[size_t(t)], score[size_t(order[size_t(t)])]);
      }
    }
  }
  g.queries.clear();
  g.queries.shrink_to_fit();
  g.built = true;
  g.indexed = num_keys;
}

void CsSelector::insert_key(GroupTable& g, int32_t pos, const float* key, int d) {
  const int M = p_.subspaces, C = p_.centroids, ds = d / M;
  std::vector<float> k(static_cast<size_t>(ds));
  for (int m = 0; m < M; ++m) {
    std::copy_n(key + size_t(m) * ds, ds, k.data());
    if (!p_.score_dot) normalize(k.data(), ds);
    for (int c = 0; c < C; ++c)
      g.lists[size_t(m) * C + c].try_insert(pos, dot(g.centroids.data() + (size_t(m) * C + c) * ds, k.data(), ds));
  }
}

void CsSelector::observe(const AttentionBatch& b) {
  if (b.layer < p_.dense_layers) return;
  const int group = b.num_heads / b.num_kv_heads, d = b.head_dim;
  SKIM_REQUIRE(d % p_.subspaces == 0, "policy: cs:subspaces={} does not divide head_dim {}", p_.subspaces, d);
  for (int r = 0; r < b.num_rows; ++r) {
    SeqState& st = seqs_[b.tables[r]];
    if (st.layers.size() <= size_t(b.layer)) st.layers.resize(size_t(b.layer) + 1);
    auto& heads = st.layers[size_t(b.layer)];
    if (heads.empty()) heads.resize(size_t(b.num_kv_heads));
    const int pos = b.positions[r];
    for (int h = 0; h < b.num_kv_heads; ++h) {
      GroupTable& g = heads[size_t(h)];
      SeqKV kv{b.kv, b.tables[r]->pages.data(), h};
      if (!b.decode && !g.built) {  // prefill: keep the group's queries until the first decode step
        const float* q = b.q + (size_t(r) * b.num_heads + size_t(h) * group) * d;
        g.queries.insert(g.queries.end(), q, q + size_t(group) * d);
        g.num_queries += 1;
        continue;
      }
      if (!g.built) build(g, kv, group, pos);
      if (pos < g.indexed) continue;  // a rewrite of an indexed key keeps its entries
      insert_key(g, pos, kv.key(pos), d);
      g.indexed = pos + 1;
    }
  }
}

void CsSelector::fork(const PageTable* from, const PageTable* to) {
  auto it = seqs_.find(from);
  if (it != seqs_.end()) seqs_[to] = it->second;
}

// ---- selection ----

uint64_t CsSelector::gather(const GroupTable& g, const float* q, int d) {
  const int M = p_.subspaces, C = p_.centroids, ds = d / M;
  std::vector<float> qs(static_cast<size_t>(ds)), cos(static_cast<size_t>(C));
  std::vector<int> order(static_cast<size_t>(C));
  uint64_t entries = 0;
  for (int m = 0; m < M; ++m) {
    std::copy_n(q + size_t(m) * ds, ds, qs.data());
    const float weight = p_.score_dot ? normalize(qs.data(), ds) : (normalize(qs.data(), ds), 1.0f);
    for (int c = 0; c < C; ++c) cos[size_t(c)] = dot(g.centroids.data() + (size_t(m) * C + c) * ds, qs.data(), ds);
    for (int c = 0; c < C; ++c) order[size_t(c)] = c;
    int take = 1;
    std::partial_sort(order.begin(), order.begin() + std::min(C, std::max(1, p_.backoff_top)), order.end(),
                      [&](int a, int b) { return cos[size_t(a)] > cos[size_t(b)]; });
    subspace_searches_ += 1;
    if (cos[size_t(order[0])] < p_.backoff) {  // off-manifold query: widen the search
      take = std::min(C, p_.backoff_top);
      backoffs_ += 1;
    }
    for (int t = 0; t < take; ++t) {
      const TopList& list = g.lists[size_t(m) * C + order[size_t(t)]];
      entries += uint64_t(list.size());
      for (int i = 0; i < list.size(); ++i) {
        int32_t k = list.index(i);
        if (size_t(k) >= acc_.size()) continue;
        if (!mark_[size_t(k)]) {
          mark_[size_t(k)] = 1;
          touched_.push_back(k);
        }
        acc_[size_t(k)] += weight * list.score(i);
      }
    }
  }
  return entries;
}

void CsSelector::select(const SelectInput& in, Selection& out) {
  const AttentionBatch& b = in.batch;
  const int group = b.num_heads / b.num_kv_heads, d = b.head_dim, M = p_.subspaces, C = p_.centroids;
  auto it = seqs_.find(b.tables[in.row]);
  SKIM_REQUIRE(it != seqs_.end() && it->second.layers.size() > size_t(b.layer) &&
                   it->second.layers[size_t(b.layer)][size_t(in.kv_head)].built,
               "policy cs: no tables for this sequence at layer {} (cs indexes the prompt during prefill)",
               b.layer);
  GroupTable& g = it->second.layers[size_t(b.layer)][size_t(in.kv_head)];
  const int ctx = in.context;
  const int wb = std::max(0, ctx - p_.window);
  const int K = std::min(ctx, std::max(1, int(std::ceil(p_.keep * ctx))));
  const int n_pick = std::max(0, K - (ctx - wb));
  const int units = p_.pool_group ? 1 : group;
  const bool search = g.searches % std::max(1, p_.step) == 0 || int(g.picks.size()) != units;
  g.searches += 1;
  if (search) {
    g.picks.assign(size_t(units), {});
    g.search_window = wb;
  }
  // Between searches the selection is the last one plus every key since: keys that left the
  // window stay in until the next search.
  const int win = std::min(wb, g.search_window);
  if (acc_.size() < size_t(ctx)) {
    acc_.resize(size_t(ctx), 0.0f);
    mark_.resize(size_t(ctx), 0);
  }

  out.heads.assign(size_t(units), {});
  uint64_t entries = 0;
  std::vector<float> pooled(static_cast<size_t>(d));
  for (int u = 0; u < units; ++u) {
    const float* q0 = b.q + (size_t(in.row) * b.num_heads + size_t(in.kv_head) * group) * d;
    if (search) {
      const float* q = q0 + size_t(u) * d;
      if (p_.pool_group) {  // group mean of the query heads, as ReSA pools
        std::fill(pooled.begin(), pooled.end(), 0.0f);
        for (int h = 0; h < group; ++h)
          for (int i = 0; i < d; ++i) pooled[size_t(i)] += q0[size_t(h) * d + i] / float(group);
        q = pooled.data();
      }
      entries += gather(g, q, d);
      union_sum_ += touched_.size();
      searched_ += 1;
      std::vector<int32_t>& picks = g.picks[size_t(u)];
      for (int32_t k : touched_)
        if (k < wb) picks.push_back(k);
      const size_t top = std::min(picks.size(), size_t(n_pick));
      std::partial_sort(picks.begin(), picks.begin() + long(top), picks.end(), [&](int32_t a, int32_t c) {
        return acc_[size_t(a)] > acc_[size_t(c)] || (acc_[size_t(a)] == acc_[size_t(c)] && a < c);
      });
      picks.resize(top);
      for (int32_t k : touched_) {
        acc_[size_t(k)] = 0.0f;
        mark_[size_t(k)] = 0;
      }
      touched_.clear();
      out.metadata_bytes += uint64_t(M) * C * (d / M) * sizeof(float);
    }
    // Recent window first (forced in), then the picks in descending summed score.
    std::vector<KeyRange>& r = out.heads[size_t(u)];
    if (win < ctx) r.push_back({win, ctx});
    for (int32_t k : g.picks[size_t(u)])
      if (k < win) r.push_back({k, k + 1});
    selected_sum_ += uint64_t(r.size()) - (win < ctx ? 1 : 0) + uint64_t(ctx - win);
  }
  out.metadata_bytes += entries * TopList::kEntryBytes;
  selects_ += uint64_t(units);
  if (p_.recall)
    for (int h = 0; h < group; ++h) measure_recall(in, out.heads[p_.pool_group ? 0 : size_t(h)], h);
}

// Recall of the true top-K: the K keys with the largest q.k over the whole context (K = keep x
// context), against the keys the selection covers. Costs one dense scoring pass.
void CsSelector::measure_recall(const SelectInput& in, const std::vector<KeyRange>& ranges, int h) {
  const AttentionBatch& b = in.batch;
  const int group = b.num_heads / b.num_kv_heads, d = b.head_dim, ctx = in.context;
  const int K = std::min(ctx, std::max(1, int(std::ceil(p_.keep * ctx))));
  const float* q = b.q + (size_t(in.row) * b.num_heads + size_t(in.kv_head) * group + h) * d;
  SeqKV kv{b.kv, b.tables[in.row]->pages.data(), in.kv_head};
  std::vector<float> s(static_cast<size_t>(ctx));
  std::vector<int32_t> idx(static_cast<size_t>(ctx));
  for (int j = 0; j < ctx; ++j) {
    s[size_t(j)] = dot(q, kv.key(j), d);
    idx[size_t(j)] = j;
  }
  std::nth_element(idx.begin(), idx.begin() + (K - 1), idx.end(),
                   [&](int32_t a, int32_t c) { return s[size_t(a)] > s[size_t(c)]; });
  std::vector<uint8_t> in_sel(static_cast<size_t>(ctx), 0);
  for (KeyRange r : ranges)
    for (int j = r.begin; j < r.end; ++j) in_sel[size_t(j)] = 1;
  for (int t = 0; t < K; ++t) recall_hits_ += in_sel[size_t(idx[size_t(t)])];
  recall_total_ += uint64_t(K);
}

uint64_t CsSelector::table_bytes() const {
  uint64_t bytes = 0;
  for (auto& [table, st] : seqs_)
    for (auto& layer : st.layers)
      for (auto& g : layer) {
        bytes += g.centroids.size() * sizeof(float);
        for (auto& l : g.lists) bytes += uint64_t(l.capacity()) * TopList::kEntryBytes;
      }
  return bytes;
}

std::map<std::string, double> CsSelector::counters() const {
  std::map<std::string, double> c;
  c["cs_table_bytes"] = double(table_bytes());
  if (searched_ > 0) c["cs_union_keys"] = double(union_sum_) / double(searched_);
  if (selects_ > 0) c["cs_selected_keys"] = double(selected_sum_) / double(selects_);
  if (subspace_searches_ > 0) c["cs_backoff_rate"] = double(backoffs_) / double(subspace_searches_);
  if (recall_total_ > 0) c["cs_recall"] = double(recall_hits_) / double(recall_total_);
  return c;
}

}  // namespace skim
