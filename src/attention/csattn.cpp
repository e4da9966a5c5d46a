#include "attention/csattn.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "attention/kmeans.h"
#include "core/dtype.h"
#include "core/error.h"
#include "attention/policy_registry.h"

namespace skim {

namespace {

float dot(const float* a, const float* b, int n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// ---- parameters ----

CsParams cs_params(const PolicyPart& p) {
  // Types and ranges were checked by the parser against cs_policy_info(); what is left here
  // relates two keys.
  CsParams c;
  p.read("subspaces", c.subspaces, "centroids", c.centroids, "iters", c.iters, "list", c.list, "keep", c.keep,
         "window", c.window, "step", c.step, "backoff", c.backoff, "backoff_top", c.backoff_top,
         "points", c.max_points);
  c.recall = p.integer("recall", 0) != 0;
  c.dense_layers = p.integer("dense_layers", 0);
  c.missing_mean = p.text("missing", c.missing_mean ? "mean" : "zero") == "mean";
  c.pool_group = p.text("pool", c.pool_group ? "group" : "head") == "group";
  c.score_dot = p.text("score", c.score_dot ? "dot" : "cos") == "dot";
  SKIM_REQUIRE(c.backoff_top <= c.centroids, "policy: cs:backoff_top={} must be <= centroids ({})", c.backoff_top,
               c.centroids);
  return c;
}

// ---- TopList ----

float TopList::score(int i) const { return f16_to_f32(score_[size_t(i)]); }

bool TopList::below(size_t a, size_t b) const {
  const int sa = order_key(score_[a]), sb = order_key(score_[b]);
  return sa < sb || (sa == sb && index_[a] > index_[b]);
}

int TopList::admit_key() const { return full() && capacity_ > 0 ? order_key(score_[0]) : INT_MIN; }

void TopList::sift_down(size_t i) {
  const size_t n = index_.size();
  for (;;) {
    size_t least = i;
    for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < n; ++c)
      if (below(c, least)) least = c;
    if (least == i) return;
    std::swap(index_[i], index_[least]);
    std::swap(score_[i], score_[least]);
    i = least;
  }
}

void TopList::sift_up(size_t i) {
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!below(i, parent)) return;
    std::swap(index_[i], index_[parent]);
    std::swap(score_[i], score_[parent]);
    i = parent;
  }
}

bool TopList::try_insert(int32_t index, float score) {
  if (capacity_ <= 0) return false;
  const uint16_t h = f32_to_f16(score);
  if (int(index_.size()) == capacity_) {
    // Compare what is stored; an equal score never displaces an earlier arrival.
    if (order_key(h) <= order_key(score_[0])) return false;
    index_[0] = index;
    score_[0] = h;
    sift_down(0);
    return true;
  }
  index_.push_back(index);
  score_.push_back(h);
  sift_up(index_.size() - 1);
  return true;
}

std::vector<TopList::Entry> TopList::sorted() const {
  std::vector<Entry> e(index_.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = {index_[i], f16_to_f32(score_[i])};
  std::sort(e.begin(), e.end(), [](Entry a, Entry b) { return a.score > b.score || (a.score == b.score && a.index < b.index); });
  return e;
}

// ---- building and streaming ----

void TopList::assign_sorted(const int32_t* index, const float* score, int n) {
  SKIM_REQUIRE(n <= capacity_, "TopList: {} entries exceed the capacity {}", n, capacity_);
  // Reversed, the entries nearly form a min-heap already; fp16 rounding can tie scores that
  // differed, so heapify to be sure.
  index_.resize(size_t(n));
  score_.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    index_[size_t(i)] = index[n - 1 - i];
    score_[size_t(i)] = f32_to_f16(score[n - 1 - i]);
  }
  for (size_t i = size_t(n) / 2; i-- > 0;) sift_down(i);
}

namespace {

// The `top` largest of score[0..n) as (index, score), by descending score, ties by index: the
// order try-inserting them one by one would leave. A threshold by nth_element on the values,
// then a sort of the few kept, instead of a sort of all n.
void top_entries(const float* score, int n, int top, std::vector<int32_t>& index, std::vector<float>& kept) {
  index.clear();
  kept.clear();
  if (top <= 0) return;
  std::vector<float> v(score, score + n);
  std::nth_element(v.begin(), v.begin() + (top - 1), v.end(), std::greater<float>());
  const float threshold = v[size_t(top - 1)];
  for (int j = 0; j < n; ++j)
    if (score[j] > threshold) index.push_back(j);
  for (int j = 0; j < n && int(index.size()) < top; ++j)
    if (score[j] == threshold) index.push_back(j);
  std::sort(index.begin(), index.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  for (int32_t j : index) kept.push_back(score[j]);
}

}  // namespace

void CsSelector::build_subspace(GroupTable& g, const SeqKV& kv, int group, int num_keys, int m) const {
  const int d = kv.layer.head_dim, C = p_.centroids, ds = d / p_.subspaces;
  // k-means on a strided sample of the (query, head) vectors when there are many.
  const int total = g.num_queries * group;
  const int stride = (total + p_.max_points - 1) / p_.max_points;
  const int n = (total + stride - 1) / stride;
  std::vector<float> pts(size_t(n) * ds);
  for (int i = 0; i < n; ++i) {
    float* x = pts.data() + size_t(i) * ds;
    std::copy_n(g.queries.data() + size_t(i) * stride * d + size_t(m) * ds, ds, x);
    normalize(x, ds);
  }
  KMeansResult km = cosine_kmeans(pts.data(), n, ds, C, p_.iters, 0x5eed0000u + uint64_t(m));
  float* centroids = g.centroids.data() + size_t(m) * C * ds;
  std::copy(km.centroids.begin(), km.centroids.end(), centroids);

  std::vector<float> keys(size_t(num_keys) * ds), score(size_t(C) * num_keys), kept;
  for (int j = 0; j < num_keys; ++j) {
    float* k = keys.data() + size_t(j) * ds;
    std::copy_n(kv.key(j) + size_t(m) * ds, ds, k);
    if (!p_.score_dot) normalize(k, ds);
  }
  centroid_scores(centroids, C, ds, keys.data(), num_keys, score.data());  // [C][num_keys]
  std::vector<int32_t> index;
  for (int c = 0; c < C; ++c) {
    TopList& list = g.lists[size_t(m) * C + c];
    const float* row = score.data() + size_t(c) * num_keys;
    top_entries(row, num_keys, std::min(list.capacity(), num_keys), index, kept);
    list.assign_sorted(index.data(), kept.data(), int(index.size()));
    double all = 0, in = 0;
    for (int j = 0; j < num_keys; ++j) all += row[j];
    for (float v : kept) in += v;
    const int left = num_keys - int(kept.size());
    g.tail[size_t(m) * C + c] = left > 0 ? float((all - in) / left) : 0.0f;
  }
}

void CsSelector::build_layer(std::vector<GroupTable>& heads, const SeqKV& kv0, int group, int num_keys) {
  const int M = p_.subspaces, C = p_.centroids, ds = kv0.layer.head_dim / M;
  SKIM_REQUIRE(num_keys > 0, "policy cs: no prompt keys to index");
  const int capacity = p_.list <= 1.0 ? std::max(1, int(std::ceil(p_.list * num_keys))) : int(p_.list);
  for (GroupTable& g : heads) {
    SKIM_REQUIRE(g.num_queries > 0,
                 "policy cs: a sequence reached decoding without prompt queries to build its tables "
                 "from (cs indexes the prompt during prefill)");
    g.centroids.assign(size_t(M) * C * ds, 0.0f);
    g.lists.assign(size_t(M) * C, TopList(capacity));
    g.tail.assign(size_t(M) * C, 0.0f);
  }
  // Every (KV group, subspace) is independent: one task each, spread over the threads (24 for
  // SmolLM2's 3 groups x 8 subspaces); k-means inside a task runs on one thread.
  const int tasks = int(heads.size()) * M;
#pragma omp parallel for schedule(dynamic)
  for (int t = 0; t < tasks; ++t) {
    SeqKV kv = kv0;
    kv.kv_head = t / M;
    build_subspace(heads[size_t(t / M)], kv, group, num_keys, t % M);
  }
  for (GroupTable& g : heads) {
    g.admit.resize(g.lists.size());
    for (size_t l = 0; l < g.lists.size(); ++l) g.admit[l] = g.lists[l].admit_key();
    g.queries.clear();
    g.queries.shrink_to_fit();
    g.built = true;
    g.indexed = num_keys;
  }
}

void CsSelector::insert_key(GroupTable& g, int32_t pos, const float* key, int d) {
  const int M = p_.subspaces, C = p_.centroids, ds = d / M;
  std::vector<float> k(static_cast<size_t>(ds));
  for (int m = 0; m < M; ++m) {
    std::copy_n(key + size_t(m) * ds, ds, k.data());
    if (!p_.score_dot) normalize(k.data(), ds);
    for (int c = 0; c < C; ++c) {
      const size_t l = size_t(m) * C + c;
      const float score = dot(g.centroids.data() + l * ds, k.data(), ds);
      if (TopList::order_key(f32_to_f16(score)) <= g.admit[l]) continue;  // most keys: refused here
      g.lists[l].try_insert(pos, score);
      g.admit[l] = g.lists[l].admit_key();
    }
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
    const SeqKV kv0{b.kv, b.tables[r]->pages.data(), 0};
    if (!b.decode && !heads[0].built) {  // prefill: keep the group's queries until the first decode step
      for (int h = 0; h < b.num_kv_heads; ++h) {
        GroupTable& g = heads[size_t(h)];
        const float* q = b.q + (size_t(r) * b.num_heads + size_t(h) * group) * d;
        g.queries.insert(g.queries.end(), q, q + size_t(group) * d);
        g.num_queries += 1;
      }
      continue;
    }
    if (!heads[0].built) build_layer(heads, kv0, group, pos);
    if (pos < heads[0].indexed) continue;  // a rewrite of an indexed key keeps its entries
    for (int h = 0; h < b.num_kv_heads; ++h) {
      GroupTable& g = heads[size_t(h)];
      SeqKV kv = kv0;
      kv.kv_head = h;
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
  qs_.resize(size_t(ds));
  cos_.resize(size_t(C));
  uint64_t bytes = 0;
  for (int m = 0; m < M; ++m) {
    std::copy_n(q + size_t(m) * ds, ds, qs_.data());
    const float norm = normalize(qs_.data(), ds);
    const float* centroids = g.centroids.data() + size_t(m) * C * ds;
    for (int c = 0; c < C; ++c) cos_[size_t(c)] = dot(centroids + size_t(c) * ds, qs_.data(), ds);
    const int best = int(std::max_element(cos_.begin(), cos_.end()) - cos_.begin());
    const float weight = p_.score_dot ? norm : 1.0f;
    subspace_searches_ += 1;
    best_cos_sum_ += cos_[size_t(best)];
    int take = 1;
    if (cos_[size_t(best)] < p_.backoff) {  // off-manifold query: widen the search
      take = std::min(C, p_.backoff_top);
      backoffs_ += 1;
    }
    order_.resize(size_t(C));
    for (int c = 0; c < C; ++c) order_[size_t(c)] = c;
    std::partial_sort(order_.begin(), order_.begin() + take, order_.end(),
                      [&](int a, int b) { return cos_[size_t(a)] > cos_[size_t(b)] || (cos_[size_t(a)] == cos_[size_t(b)] && a < b); });
    for (int t = 0; t < take; ++t) {
      const TopList& list = g.lists[size_t(m) * C + order_[size_t(t)]];
      const float floor = p_.missing_mean ? g.tail[size_t(m) * C + order_[size_t(t)]] : 0.0f;
      bytes += uint64_t(list.size()) * TopList::kEntryBytes + (p_.missing_mean ? sizeof(float) : 0);
      for (int i = 0; i < list.size(); ++i) {
        const int32_t k = list.index(i);
        if (size_t(k) >= acc_.size()) continue;
        if (!mark_[size_t(k)]) {
          mark_[size_t(k)] = 1;
          touched_.push_back(k);
        }
        acc_[size_t(k)] += weight * (list.score(i) - floor);
      }
    }
  }
  return bytes;
}

void CsSelector::pick_top(std::vector<int32_t>& picks, int n_pick, int window_begin, bool ordered) {
  // The score of the n_pick-th best touched key below the window: an nth_element over the
  // scores as a contiguous array (no indirection), then how many of that score may go in
  // (ties by index: the smallest indices).
  scores_.clear();
  for (int32_t k : touched_)
    if (k < window_begin) scores_.push_back(acc_[size_t(k)]);
  float threshold = -INFINITY;
  size_t ties = scores_.size();
  if (size_t(n_pick) < scores_.size()) {
    if (n_pick == 0) {
      picks.clear();
      return;
    }
    std::nth_element(scores_.begin(), scores_.begin() + (n_pick - 1), scores_.end(), std::greater<float>());
    threshold = scores_[size_t(n_pick - 1)];
    size_t above = 0;
    for (float v : scores_) above += v > threshold;
    ties = size_t(n_pick) - above;
  }
  // A scan of the positions below the window yields the picks by position, with no sort;
  // branch-free, since which keys are touched is unpredictable.
  picks.resize(size_t(window_begin));
  size_t n = 0;
  for (int k = 0; k < window_begin; ++k) {
    const bool touched = mark_[size_t(k)] != 0;
    const float v = acc_[size_t(k)];
    const bool tie = touched & (v == threshold) & (ties > 0);
    picks[n] = k;
    n += size_t((touched & (v > threshold)) | tie);
    ties -= size_t(tie);
  }
  picks.resize(n);
  if (ordered) {  // descending summed score, ties by index: the order a traversal follows
    auto better = [&](int32_t a, int32_t c) {
      return acc_[size_t(a)] > acc_[size_t(c)] || (acc_[size_t(a)] == acc_[size_t(c)] && a < c);
    };
    std::sort(picks.begin(), picks.end(), better);
  }
}

namespace {

// The selection as ranges: the recent window [win, ctx), then the picks below it. Ordered: the
// window first, then the picks in descending score (the order an ART traversal follows).
// Otherwise the picks come by position (pick_top), so neighbours join as they are appended:
// one forward scan of the cache, nothing to sort downstream.
void emit_ranges(const std::vector<int32_t>& picks, int win, int ctx, bool ordered, std::vector<KeyRange>& r) {
  if (ordered && win < ctx) r.push_back({win, ctx});
  for (int32_t k : picks) {
    if (k >= win) continue;
    if (!ordered && !r.empty() && r.back().end == k) r.back().end = k + 1;
    else r.push_back({k, k + 1});
  }
  if (ordered || win >= ctx) return;
  if (!r.empty() && r.back().end == win) r.back().end = ctx;
  else r.push_back({win, ctx});
}

}  // namespace

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
  for (int u = 0; u < units; ++u) {
    const float* q0 = b.q + (size_t(in.row) * b.num_heads + size_t(in.kv_head) * group) * d;
    if (search) {
      const float* q = q0 + size_t(u) * d;
      if (p_.pool_group) {  // group mean of the query heads, as ReSA pools
        pooled_.assign(size_t(d), 0.0f);
        for (int h = 0; h < group; ++h)
          for (int i = 0; i < d; ++i) pooled_[size_t(i)] += q0[size_t(h) * d + i] / float(group);
        q = pooled_.data();
      }
      out.metadata_bytes += gather(g, q, d);
      union_sum_ += touched_.size();
      searched_ += 1;
      pick_top(g.picks[size_t(u)], n_pick, wb, in.ordered);
      out.metadata_bytes += uint64_t(M) * C * (d / M) * sizeof(float);
    }
    std::vector<KeyRange>& r = out.heads[size_t(u)];
    emit_ranges(g.picks[size_t(u)], win, ctx, in.ordered, r);
    for (int32_t k : g.picks[size_t(u)]) selected_sum_ += k < win;
    selected_sum_ += uint64_t(ctx - win);
    if (p_.recall)  // the heads this unit serves; the candidates exist only when it searched
      for (int h = p_.pool_group ? 0 : u; h < (p_.pool_group ? group : u + 1); ++h)
        measure_recall(in, r, h, search ? mark_.data() : nullptr, wb);
    if (search) {
      for (int32_t k : touched_) {
        acc_[size_t(k)] = 0.0f;
        mark_[size_t(k)] = 0;
      }
      touched_.clear();
    }
  }
  selects_ += uint64_t(units);
}

// Recall of the true top-K: the K keys with the largest q.k over the whole context (K = keep x
// context), against the keys the selection covers, and against the candidates it chose from
// (the gathered lists' keys and the window: what a perfect ranking of them could reach).
// Costs one dense scoring pass.
void CsSelector::measure_recall(const SelectInput& in, const std::vector<KeyRange>& ranges, int h,
                                const uint8_t* gathered, int window_begin) {
  const AttentionBatch& b = in.batch;
  const int group = b.num_heads / b.num_kv_heads, d = b.head_dim, ctx = in.context;
  const double keep = p_.recall_keep > 0 ? p_.recall_keep : p_.keep;
  const int K = std::min(ctx, std::max(1, int(std::ceil(keep * ctx))));
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
  const size_t layer = size_t(b.layer);
  if (recall_.size() <= layer) recall_.resize(layer + 1);
  LayerRecall& c = recall_[layer];
  int in_window = 0;
  for (int t = 0; t < K; ++t) {
    const int32_t j = idx[size_t(t)];
    c.hits += in_sel[size_t(j)];
    in_window += j >= window_begin;
    if (gathered) c.candidate_hits += j >= window_begin || gathered[size_t(j)];
  }
  // The best any ranking could do with the window forced in: its top-K keys, then as many
  // picks as the selection has (K_sel - window).
  const int K_sel = std::min(ctx, std::max(1, int(std::ceil(p_.keep * ctx))));
  const int picks = std::max(0, K_sel - (ctx - window_begin));
  c.ceiling_hits += uint64_t(in_window + std::min(picks, K - in_window));
  c.total += uint64_t(K);
  if (gathered) c.candidate_total += uint64_t(K);
}

const CsGroupTables* CsSelector::tables(const PageTable* seq, int layer, int kv_head) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || it->second.layers.size() <= size_t(layer)) return nullptr;
  const auto& heads = it->second.layers[size_t(layer)];
  return size_t(kv_head) < heads.size() ? &heads[size_t(kv_head)] : nullptr;
}

uint64_t CsSelector::table_bytes() const {
  uint64_t bytes = 0;
  for (auto& [table, st] : seqs_)
    for (auto& layer : st.layers)
      for (auto& g : layer) {
        bytes += (g.centroids.size() + g.tail.size()) * sizeof(float);
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
  if (subspace_searches_ > 0) c["cs_centroid_cos"] = best_cos_sum_ / double(subspace_searches_);
  LayerRecall all;
  for (size_t l = 0; l < recall_.size(); ++l) {
    const LayerRecall& r = recall_[l];
    if (r.total > 0) c[fmt::format("cs_recall.L{}", l)] = double(r.hits) / double(r.total);
    if (r.candidate_total > 0) c[fmt::format("cs_candidate_recall.L{}", l)] = double(r.candidate_hits) / double(r.candidate_total);
    all.hits += r.hits;
    all.ceiling_hits += r.ceiling_hits;
    all.total += r.total;
    all.candidate_hits += r.candidate_hits;
    all.candidate_total += r.candidate_total;
  }
  if (all.total > 0) c["cs_recall"] = double(all.hits) / double(all.total);
  if (all.total > 0) c["cs_recall_ceiling"] = double(all.ceiling_hits) / double(all.total);
  if (all.candidate_total > 0) c["cs_candidate_recall"] = double(all.candidate_hits) / double(all.candidate_total);
  return c;
}

PolicyInfo cs_policy_info() {
  const CsParams c;
  return {.name = "cs",
          .summary = "CSAttention: query-centric centroid tables built at prefill; decode sums list scores and attends to the top K",
          .keys = {integer_key("subspaces", c.subspaces, 1, 1024, "M subspaces the head dimension is split into (must divide it)"),
                   integer_key("centroids", c.centroids, 1, 65536, "C cosine k-means centroids per subspace"),
                   integer_key("iters", c.iters, 0, 1000, "k-means iterations"),
                   integer_key("points", c.max_points, 1, 1 << 24, "k-means runs on at most this many prompt query vectors"),
                   positive_key("list", c.list, "L, keys kept per centroid: a fraction of the prompt when <= 1, entries when > 1"),
                   fraction_key("keep", c.keep, "K = ceil(keep x context) keys attended"),
                   integer_key("window", c.window, 0, kNoUpperBound, "most recent keys always attended"),
                   integer_key("step", c.step, 1, 1000000, "search every step decode steps"),
                   number_key("backoff", c.backoff, -1, 1, "below this best centroid cosine, use the top backoff_top centroids"),
                   integer_key("backoff_top", c.backoff_top, 1, 65536, "centroids per subspace in a back-off (<= centroids)"),
                   choice_key("pool", c.pool_group ? "group" : "head", {"head", "group"}, "one search per query head, or one per KV group with its mean query"),
                   choice_key("score", c.score_dot ? "dot" : "cos", {"cos", "dot"}, "list scores: c . k_s (dot) or cosines (cos, the paper's)"),
                   choice_key("missing", c.missing_mean ? "mean" : "zero", {"zero", "mean"}, "what a key missing from a picked list counts there"),
                   integer_key("recall", c.recall ? 1 : 0, 0, 1, "1: measure recall of the true top-K (a dense scoring pass per selection)"),
                   integer_key("dense_layers", c.dense_layers, 0, 1000000, "the first N layers stay dense")},
          .composes_with = {"rectify", "mac", "art"}, .sequence_state = true,
          .order = "recent window, then descending summed list score"};
}

}  // namespace skim
