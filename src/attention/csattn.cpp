#include "attention/csattn.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend/cpu/cs_kernels.h"
#include "backend/cpu/dot.h"
#include "core/error.h"
#include "attention/policy_registry.h"

namespace skim {

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

void CsSelector::build_layer(std::vector<GroupTable>& heads, const SeqKV& kv0, int group, int num_keys) {
  const int M = p_.subspaces, C = p_.centroids, ds = kv0.layer.head_dim / M;
  SKIM_REQUIRE(num_keys > 0, "policy cs: no prompt keys to index");
  const int capacity = p_.list <= 1.0 ? std::max(1, int(std::ceil(p_.list * num_keys))) : int(p_.list);
  for (GroupTable& g : heads) {
    SKIM_REQUIRE(g.num_queries > 0,
                 "policy cs: a sequence reached decoding without prompt queries to build its tables "
                 "from (cs indexes the prompt during prefill)");
    g.centroids.assign(size_t(M) * C * ds, 0.0f);
    g.list_capacity = capacity;
    g.list_index.assign(size_t(M) * C * capacity, 0);
    g.list_score.assign(size_t(M) * C * capacity, 0);
    g.list_size.assign(size_t(M) * C, 0);
    g.tail.assign(size_t(M) * C, 0.0f);
  }
  // Every (KV group, subspace) is independent: one task each, spread over the threads (24 for
  // SmolLM2's 3 groups x 8 subspaces); k-means inside a task runs on one thread.
  const int tasks = int(heads.size()) * M;
#pragma omp parallel for schedule(dynamic)
  for (int t = 0; t < tasks; ++t) {
    GroupTable& g = heads[size_t(t / M)];
    cpu::cs_build({.head_dim = kv0.layer.head_dim, .subspaces = M, .centroids = C, .iters = p_.iters,
                   .max_points = p_.max_points, .list_capacity = g.list_capacity, .score_dot = p_.score_dot,
                   .subspace = t % M, .vectors = g.queries.data(), .num_vectors = g.num_queries * group,
                   .k_pool = kv0.layer.k, .pages = kv0.pages, .page_size = kv0.layer.page_size,
                   .num_kv_heads = kv0.layer.num_kv_heads, .kv_head = t / M, .num_keys = num_keys,
                   .centroids_out = g.centroids.data(), .list_index = g.list_index.data(),
                   .list_score = g.list_score.data(), .list_size = g.list_size.data(), .tail = g.tail.data()});
  }
  for (GroupTable& g : heads) {
    g.admit.resize(size_t(g.num_lists()));
    for (int l = 0; l < g.num_lists(); ++l) g.admit[size_t(l)] = g.list(l).admit_key();
    g.queries.clear();
    g.queries.shrink_to_fit();
    g.built = true;
    g.indexed = num_keys;
  }
}

void CsSelector::insert_key(GroupTable& g, int32_t pos, const float* key, int d) {
  cpu::cs_insert({.head_dim = d, .subspaces = p_.subspaces, .centroids = p_.centroids,
                  .list_capacity = g.list_capacity, .score_dot = p_.score_dot, .centroids_data = g.centroids.data(),
                  .list_index = g.list_index.data(), .list_score = g.list_score.data(), .list_size = g.list_size.data(),
                  .admit = g.admit.data(), .key = key, .position = pos});
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



// One search (cpu::cs_select over the group's tables): picks the n_pick keys below wb; with
// recall on, leaves the candidates in candidates_. Returns the table bytes read.
uint64_t CsSelector::search_one(const GroupTable& g, const float* q, int d, int ctx, int wb, int n_pick, bool ordered,
                                std::vector<int32_t>& picks) {
  const CsTablesView view = g.view();
  const int32_t context = ctx, window_begin = wb, n = n_pick;
  int32_t count = 0;
  picks.resize(size_t(std::max(wb, 1)));
  if (p_.recall) candidates_.resize(size_t(ctx));
  const uint64_t before = stats_.table_bytes;
  cpu::cs_select({.searches = 1, .head_dim = d, .subspaces = p_.subspaces, .centroids = p_.centroids,
                  .list_capacity = g.list_capacity, .score_dot = p_.score_dot, .missing_mean = p_.missing_mean,
                  .by_score = ordered, .backoff = p_.backoff, .backoff_top = p_.backoff_top, .queries = q,
                  .tables = &view, .context = &context, .window_begin = &window_begin, .n_pick = &n,
                  .max_picks = wb, .picks = picks.data(), .pick_counts = &count,
                  .candidates = p_.recall ? candidates_.data() : nullptr, .candidate_stride = ctx,
                  .stats = &stats_},
                 scratch_);
  picks.resize(size_t(count));
  return stats_.table_bytes - before;
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
      out.metadata_bytes += search_one(g, q, d, ctx, wb, n_pick, in.ordered, g.picks[size_t(u)]);
      searched_ += 1;
      out.metadata_bytes += uint64_t(M) * C * (d / M) * sizeof(float);
    }
    std::vector<KeyRange>& r = out.heads[size_t(u)];
    emit_ranges(g.picks[size_t(u)], win, ctx, in.ordered, r);
    for (int32_t k : g.picks[size_t(u)]) selected_sum_ += k < win;
    selected_sum_ += uint64_t(ctx - win);
    if (p_.recall)  // the heads this unit serves; the candidates exist only when it searched
      for (int h = p_.pool_group ? 0 : u; h < (p_.pool_group ? group : u + 1); ++h)
        measure_recall(in, r, h, search ? candidates_.data() : nullptr, wb);
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
        bytes += uint64_t(g.num_lists()) * uint64_t(g.list_capacity) * TopList::kEntryBytes;
      }
  return bytes;
}

std::map<std::string, double> CsSelector::counters() const {
  std::map<std::string, double> c;
  c["cs_table_bytes"] = double(table_bytes());
  if (searched_ > 0) c["cs_union_keys"] = double(stats_.candidates) / double(searched_);
  if (selects_ > 0) c["cs_selected_keys"] = double(selected_sum_) / double(selects_);
  if (stats_.subspace_searches > 0) {
    c["cs_backoff_rate"] = double(stats_.backoffs) / double(stats_.subspace_searches);
    c["cs_centroid_cos"] = stats_.best_cos / double(stats_.subspace_searches);
  }
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
          .order = "recent window, then descending summed list score", .backends = {"cpu", "cuda"}};
}

}  // namespace skim
