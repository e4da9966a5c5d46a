#include "backend/cuda/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <numeric>
#include <random>
#include <vector>

#include "attention/policy.h"
#include "backend/cuda/art_decode_attention.cuh"
#include "backend/cuda/cs_select.cuh"
#include "backend/cuda/gpu_forward.h"
#include "backend/cuda/group_page_select.cuh"
#include "backend/cuda/quest_page_select.cuh"
#include "backend/cuda/ops.cuh"
#include "backend/cuda/paged_decode_attention.cuh"
#include "backend/cuda/paged_prefill_attention.cuh"
#include "backend/cuda/token_decode_attention.cuh"
#include "backend/cuda/window_page_plan.cuh"

namespace skim::cuda {

double copy_bandwidth(size_t bytes) {
  DeviceBuffer<uint8_t> src(bytes), dst(bytes);
  check(cudaMemset(src.data(), 1, bytes), "cudaMemset");
  double best = 1e30;
  for (int i = 0; i < 6; ++i)
    best = std::min(best, gpu_time_ms(nullptr, [&] {
                      check(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, nullptr),
                            "cudaMemcpyAsync");
                    }));
  return 2.0 * double(bytes) / (best / 1e3);
}

namespace {

// `batch` sequences of `context` tokens on random bf16 pages (each sequence's pages in order),
// in enough copies of the cache to exceed L2 (50-60 MB) several times over, so that calls
// rotating among the copies read HBM.
struct RandomPagedCache {
  int batch, context, kv_heads, d, pages_per_seq, copies;
  size_t pool_elems;
  DeviceBuffer<uint16_t> k, v;
  DeviceBuffer<int32_t> table, lens;

  RandomPagedCache(int batch_, int context_, int kv_heads_, int d_)
      : batch(batch_), context(context_), kv_heads(kv_heads_), d(d_), pages_per_seq((context_ + 15) / 16) {
    pool_elems = size_t(batch) * pages_per_seq * kv_heads * 16 * d;
    copies = int(std::clamp(std::ceil(256e6 / kv_bytes()), 1.0, 64.0));
    k = DeviceBuffer<uint16_t>(pool_elems * copies);
    v = DeviceBuffer<uint16_t>(pool_elems * copies);
    fill_random_bf16(k.data(), k.size(), 1, 1.0f, nullptr);
    fill_random_bf16(v.data(), v.size(), 2, 1.0f, nullptr);
    std::vector<int32_t> t(size_t(batch) * pages_per_seq), l(size_t(batch), context);
    for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(i);
    upload(table, t.data(), t.size());
    upload(lens, l.data(), l.size());
  }
  double kv_bytes() const { return 2.0 * double(batch) * context * kv_heads * d * 2; }
  size_t pages() const { return size_t(batch) * pages_per_seq; }

  PagedDecodeArgs decode_args(int heads, const uint16_t* q, float* o, float* lse) const {
    return {.batch = batch, .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = d,
            .max_pages_per_seq = pages_per_seq, .max_seq_len = context, .scale = 1.0f / std::sqrt(float(d)),
            .q = q, .page_table = table.data(), .seq_lens = lens.data(), .o = o, .lse = lse};
  }
};

// Mean time of one call of `enqueue(i)` (i = call index), from the best of 5 launches of a
// CUDA graph of `calls` calls back to back.
template <class F>
double graph_us_per_call(int calls, F&& enqueue) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaGraph_t g;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < calls; ++i) enqueue(i, s);
  check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep)
    best = std::min(best, gpu_time_ms(s, [&] { check(cudaGraphLaunch(exec, s), "cudaGraphLaunch"); }));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return best * 1e3 / calls;
}

}  // namespace

AttentionPoint bench_decode_attention(int batch, int context, int heads, int kv_heads, int d, double copy_bw) {
  RandomPagedCache c(batch, context, kv_heads, d);
  DeviceBuffer<uint16_t> q(size_t(batch) * heads * d);
  DeviceBuffer<float> o(size_t(batch) * heads * d), lse(size_t(batch) * heads);
  fill_random_bf16(q.data(), q.size(), 3, 1.0f, nullptr);
  PagedDecodeArgs a = c.decode_args(heads, q.data(), o.data(), lse.data());
  DeviceBuffer<uint8_t> ws(std::max<size_t>(paged_decode_workspace_size(a), 1));
  check(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset");
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();

  AttentionPoint p;
  p.batch = batch;
  p.context = context;
  p.us = graph_us_per_call(std::max(c.copies, 100), [&](int i, cudaStream_t s) {
    a.k_pool = c.k.data() + (i % c.copies) * c.pool_elems;
    a.v_pool = c.v.data() + (i % c.copies) * c.pool_elems;
    check(paged_decode_attention(a, s), "paged_decode_attention");
  });
  p.bytes = c.kv_bytes() + double(batch) * heads * d * (2 + 4) + double(batch) * heads * 4;
  p.fraction = p.bytes / (p.us * 1e-6) / copy_bw;
  return p;
}

namespace {

// ART's workspace (zero-filled once, at least `at_least` bytes) and its device counters, given to
// `art`.
struct ArtBuffers {
  DeviceBuffer<uint8_t> ws;
  DeviceBuffer<ArtDecodeStats> stats;
  explicit ArtBuffers(ArtDecodeArgs& art, size_t at_least = 1)
      : ws(std::max(art_decode_workspace_size(art), at_least)), stats(1) {
    check(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset");
    check(cudaMemset(stats.data(), 0, stats.bytes()), "cudaMemset");
    art.attn.workspace = ws.data();
    art.attn.workspace_bytes = ws.bytes();
    art.stats = stats.data();
  }
};

// ART's decode attention over copy i % c.copies of the cache.
void attend_art(ArtDecodeArgs& art, const RandomPagedCache& c, int i, cudaStream_t s) {
  art.attn.k_pool = c.k.data() + (i % c.copies) * c.pool_elems;
  art.attn.v_pool = c.v.data() + (i % c.copies) * c.pool_elems;
  check(art_decode_attention(art, s), "art_decode_attention");
}

// What the sparse attention benches share: a random cache with random digests and queries,
// dense decode args over it, one workspace, and the timing of select, select + sparse attend
// and dense attend in the same run.
struct SelectionBench {
  RandomPagedCache c;
  size_t digest_elems;
  DeviceBuffer<uint16_t> kmin, kmax, q;
  DeviceBuffer<float> o, lse;
  PagedDecodeArgs dense;
  DeviceBuffer<uint8_t> ws;

  SelectionBench(int batch, int context, int heads, int kv_heads, int d)
      : c(batch, context, kv_heads, d),
        digest_elems(c.pages() * kv_heads * d),
        kmin(digest_elems * c.copies),
        kmax(digest_elems * c.copies),
        q(size_t(batch) * heads * d),
        o(size_t(batch) * heads * d),
        lse(size_t(batch) * heads) {
    fill_random_digests(kmin.data(), kmax.data(), kmin.size(), 4, 1.0f, nullptr);
    fill_random_bf16(q.data(), q.size(), 3, 1.0f, nullptr);
    dense = c.decode_args(heads, q.data(), o.data(), lse.data());
    ws = DeviceBuffer<uint8_t>(std::max<size_t>(paged_decode_workspace_size(dense), 1));
    check(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset");
    dense.workspace = ws.data();
    dense.workspace_bytes = ws.bytes();
  }
  const uint16_t* kmin_copy(int i) const { return kmin.data() + (i % c.copies) * digest_elems; }
  const uint16_t* kmax_copy(int i) const { return kmax.data() + (i % c.copies) * digest_elems; }
  double digest_bytes() const { return double(digest_elems) * 2 * sizeof(uint16_t); }
  // Digests, plus `fraction` of the K/V, plus q and o (and lse).
  double bytes(double fraction, int heads) const {
    return digest_bytes() + c.kv_bytes() * fraction + double(c.batch) * heads * c.d * (2 + 4) +
           double(c.batch) * heads * 4;
  }
  // Paged decode attention over `a`, on the cache's copy for call i.
  void attend(PagedDecodeArgs& a, int i, cudaStream_t s) {
    a.k_pool = c.k.data() + (i % c.copies) * c.pool_elems;
    a.v_pool = c.v.data() + (i % c.copies) * c.pool_elems;
    check(paged_decode_attention(a, s), "paged_decode_attention");
  }
  // Times select alone, select then attend_sparse(i, stream), dense alone.
  template <class Select, class Attend>
  void time_with(Select select, Attend attend_sparse, double& select_us, double& us, double& dense_us) {
    const int calls = std::max(c.copies, 100);
    select_us = graph_us_per_call(calls, select);
    us = graph_us_per_call(calls, [&](int i, cudaStream_t s) {
      select(i, s);
      attend_sparse(i, s);
    });
    dense_us = graph_us_per_call(calls, [&](int i, cudaStream_t s) { attend(dense, i, s); });
  }
  // The same with paged decode attention over `sparse` (dense's workspace).
  template <class Select>
  void time(Select select, PagedDecodeArgs& sparse, double& select_us, double& us, double& dense_us) {
    time_with(select, [&](int i, cudaStream_t s) { attend(sparse, i, s); }, select_us, us, dense_us);
  }
};

}  // namespace

SparseAttentionPoint bench_group_sparse_attention(int batch, int context, int heads, int kv_heads, int d,
                                                  double keep, int art_round_pages) {
  SelectionBench sb(batch, context, heads, kv_heads, d);
  const RandomPagedCache& c = sb.c;
  DeviceBuffer<int32_t> kept_table(size_t(batch) * kv_heads * c.pages_per_seq), kept_lens(size_t(batch) * kv_heads);
  GroupPageSelectArgs sel{.batch = batch, .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = d,
                          .max_pages_per_seq = c.pages_per_seq, .keep = keep, .by_score = art_round_pages > 0,
                          .q = sb.q.data(),
                          .page_table = c.table.data(), .seq_lens = c.lens.data(), .out_table = kept_table.data(),
                          .out_lens = kept_lens.data()};
  DeviceBuffer<uint8_t> sel_ws(std::max<size_t>(group_page_select_workspace_size(sel), 1));
  sel.workspace = sel_ws.data();
  sel.workspace_bytes = sel_ws.bytes();

  PagedDecodeArgs sparse = sb.dense;
  sparse.tables_per_kv_head = true;
  sparse.page_table = kept_table.data();
  sparse.seq_lens = kept_lens.data();
  const int kept_pages = sel.pages_kept(c.pages_per_seq);
  sparse.max_seq_len = kept_pages * 16;  // bounds every list (the newest page may be partial)

  SparseAttentionPoint p;
  p.batch = batch;
  p.context = context;
  p.keep = keep;
  auto select = [&](int i, cudaStream_t s) {
    sel.kmin = sb.kmin_copy(i);
    sel.kmax = sb.kmax_copy(i);
    check(group_page_select(sel, s), "group_page_select");
  };
  if (art_round_pages > 0) {  // ART over the kept pages in bound order, patience past the last round
    ArtDecodeArgs art{.attn = sparse, .art = {.round_pages = art_round_pages, .patience = 1 << 20}};
    art.art.lag_rounds = art_decode_lag(art);
    ArtBuffers buffers(art);
    sb.time_with(select, [&](int i, cudaStream_t s) { attend_art(art, c, i, s); }, p.select_us, p.us, p.dense_us);
  } else {
    sb.time(select, sparse, p.select_us, p.us, p.dense_us);
  }
  p.bytes = sb.bytes(double(kept_pages) / c.pages_per_seq, heads);
  return p;
}

SparseAttentionPoint bench_streaming_attention(int batch, int context, int heads, int kv_heads, int d, double keep,
                                               int art_round_pages) {
  SelectionBench sb(batch, context, heads, kv_heads, d);  // its digests unused: the plan reads none
  const RandomPagedCache& c = sb.c;
  DeviceBuffer<int32_t> table(size_t(batch) * kv_heads * c.pages_per_seq), lens(size_t(batch) * kv_heads);
  const int sink = 4, window = int(keep * context);
  WindowPagePlanArgs plan{.batch = batch, .num_kv_heads = kv_heads, .max_pages_per_seq = c.pages_per_seq,
                          .sink = sink, .window = window, .recent_first = art_round_pages > 0,
                          .page_table = c.table.data(), .seq_lens = c.lens.data(), .out_table = table.data(),
                          .out_lens = lens.data()};
  PagedDecodeArgs sparse = sb.dense;
  sparse.tables_per_kv_head = true;
  sparse.page_table = table.data();
  sparse.seq_lens = lens.data();
  const WindowPages w = window_pages(context, 16, sink, window);
  sparse.max_seq_len = w.count() * 16;

  SparseAttentionPoint p;
  p.batch = batch;
  p.context = context;
  p.keep = keep;
  const auto select = [&](int, cudaStream_t s) { check(window_page_plan(plan, s), "window_page_plan"); };
  if (art_round_pages > 0) {  // ART over the plan newest first, patience past the last round
    ArtDecodeArgs art{.attn = sparse, .art = {.round_pages = art_round_pages, .patience = 1 << 20}};
    art.art.lag_rounds = art_decode_lag(art);
    ArtBuffers buffers(art);
    sb.time_with(select, [&](int i, cudaStream_t s) { attend_art(art, c, i, s); }, p.select_us, p.us, p.dense_us);
  } else {
    sb.time(select, sparse, p.select_us, p.us, p.dense_us);
  }
  p.bytes = sb.bytes(double(w.count()) / c.pages_per_seq, heads) - sb.digest_bytes();
  return p;
}

namespace {

// Quest's selection over a SelectionBench's cache (the first query head of each group copied
// over the others where heads_agree), its lists, and the masked decode args over them, bounded
// by the union's longest list (from one selection, outside the timed graphs).
struct QuestLists {
  bool heads_agree;
  DeviceBuffer<int32_t> table, lens;
  DeviceBuffer<uint32_t> masks;
  QuestPageSelectArgs sel;
  DeviceBuffer<uint8_t> sel_ws;
  PagedDecodeArgs sparse;
  double union_fraction = 0;

  QuestLists(SelectionBench& sb, int heads, int kv_heads, double budget, bool heads_agree, bool by_score)
      : heads_agree(heads_agree),
        table(size_t(sb.c.batch) * kv_heads * sb.c.pages_per_seq),
        lens(size_t(sb.c.batch) * kv_heads),
        masks(size_t(sb.c.batch) * kv_heads * sb.c.pages_per_seq) {
    const RandomPagedCache& c = sb.c;
    const int d = c.d, group = heads / kv_heads;
    if (heads_agree)
      for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < heads; ++h)
          if (const int first = h / group * group; h != first)
            check(cudaMemcpy(sb.q.data() + (size_t(b) * heads + h) * d, sb.q.data() + (size_t(b) * heads + first) * d,
                             size_t(d) * sizeof(uint16_t), cudaMemcpyDeviceToDevice),
                  "cudaMemcpy");
    sel = QuestPageSelectArgs{.batch = c.batch, .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = d,
                              .max_pages_per_seq = c.pages_per_seq, .budget = budget, .min_tokens = 0,
                              .by_score = by_score, .q = sb.q.data(), .page_table = c.table.data(),
                              .seq_lens = c.lens.data(), .out_table = table.data(), .out_masks = masks.data(),
                              .out_lens = lens.data()};
    sel_ws = DeviceBuffer<uint8_t>(std::max<size_t>(quest_page_select_workspace_size(sel), 1));
    sel.workspace = sel_ws.data();
    sel.workspace_bytes = sel_ws.bytes();
    sparse = sb.dense;
    sparse.tables_per_kv_head = true;
    sparse.page_table = table.data();
    sparse.seq_lens = lens.data();
    sparse.head_masks = masks.data();
    select(sb, 0, nullptr);
    const size_t lists = size_t(c.batch) * kv_heads;
    std::vector<int32_t> host_lens(lists);
    check(cudaMemcpy(host_lens.data(), lens.data(), lists * sizeof(int32_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
    double listed = 0;
    sparse.max_seq_len = 0;
    for (int32_t n : host_lens) {
      listed += (n + 15) / 16;
      sparse.max_seq_len = std::max(sparse.max_seq_len, int(n));
    }
    union_fraction = listed / double(lists * c.pages_per_seq);
  }
  // A point's shape fields (the timings and bytes are the caller's).
  QuestAttentionPoint point(int context) const {
    QuestAttentionPoint p;
    p.batch = sel.batch;
    p.context = context;
    p.budget = sel.budget;
    p.heads_agree = heads_agree;
    p.union_fraction = union_fraction;
    return p;
  }
  void select(const SelectionBench& sb, int i, cudaStream_t s) {
    sel.kmin = sb.kmin_copy(i);
    sel.kmax = sb.kmax_copy(i);
    check(quest_page_select(sel, s), "quest_page_select");
  }
};

}  // namespace

QuestAttentionPoint bench_quest_attention(int batch, int context, int heads, int kv_heads, int d, double budget,
                                          bool heads_agree) {
  SelectionBench sb(batch, context, heads, kv_heads, d);
  QuestLists ql(sb, heads, kv_heads, budget, heads_agree, false);
  QuestAttentionPoint p = ql.point(context);
  sb.time([&](int i, cudaStream_t s) { ql.select(sb, i, s); }, ql.sparse, p.select_us, p.us, p.dense_us);
  p.bytes = sb.bytes(p.union_fraction, heads);
  return p;
}

QuestAttentionPoint bench_quest_art_attention(int batch, int context, int heads, int kv_heads, int d, double budget,
                                              bool heads_agree, int round_pages) {
  SelectionBench sb(batch, context, heads, kv_heads, d);
  QuestLists ql(sb, heads, kv_heads, budget, heads_agree, true);
  // Patience past the last round: every list read whole, so the cost over quest is ART's alone.
  ArtDecodeArgs art{.attn = ql.sparse, .art = {.round_pages = round_pages, .patience = 1 << 20}};
  art.art.lag_rounds = art_decode_lag(art);
  ArtBuffers buffers(art);

  QuestAttentionPoint p = ql.point(context);
  sb.time_with([&](int i, cudaStream_t s) { ql.select(sb, i, s); },
               [&](int i, cudaStream_t s) { attend_art(art, sb.c, i, s); }, p.select_us, p.us, p.dense_us);
  p.bytes = sb.bytes(p.union_fraction, heads);
  return p;
}

TokenAttentionPoint bench_token_attention(int batch, int context, int heads, int kv_heads, int d, double keep) {
  SelectionBench sb(batch, context, heads, kv_heads, d);
  const RandomPagedCache& c = sb.c;
  const size_t lists = size_t(batch) * kv_heads;
  // Each list: a random keep x context positions in ascending order; the pages holding them.
  std::mt19937_64 rng(7);
  const int n = std::clamp(int(std::ceil(keep * context)), 1, context);
  std::vector<int32_t> positions(lists * n), page_table(lists * c.pages_per_seq), page_lens(lists);
  std::vector<int32_t> all(static_cast<size_t>(context));
  std::iota(all.begin(), all.end(), 0);
  double pages_held = 0;
  for (size_t l = 0; l < lists; ++l) {
    std::vector<int32_t> pick;
    std::sample(all.begin(), all.end(), std::back_inserter(pick), n, rng);
    std::copy(pick.begin(), pick.end(), positions.begin() + std::ptrdiff_t(l * n));
    const int b = int(l / kv_heads);
    int k = 0;
    for (int32_t t : pick)  // ascending: each new page once
      if (k == 0 || page_table[l * c.pages_per_seq + k - 1] != b * c.pages_per_seq + t / 16)
        page_table[l * c.pages_per_seq + k++] = b * c.pages_per_seq + t / 16;
    page_lens[l] = k * 16;  // as if full: the pages' whole rows are read (the last one may hold fewer)
    pages_held += k;
  }
  DeviceBuffer<int32_t> token_lists, token_lens, ptable, plens;
  const std::vector<int32_t> lens_host(lists, n);
  upload(token_lists, positions.data(), positions.size());
  upload(token_lens, lens_host.data(), lens_host.size());
  upload(ptable, page_table.data(), page_table.size());
  upload(plens, page_lens.data(), page_lens.size());

  TokenDecodeArgs tok{.attn = sb.dense, .max_tokens = n, .token_lists = token_lists.data(),
                      .token_lens = token_lens.data()};
  DeviceBuffer<uint8_t> tws(std::max<size_t>(token_decode_workspace_size(tok), 1));
  tok.attn.workspace = tws.data();
  tok.attn.workspace_bytes = tws.bytes();
  PagedDecodeArgs pages = sb.dense;
  pages.tables_per_kv_head = true;
  pages.page_table = ptable.data();
  pages.seq_lens = plens.data();

  TokenAttentionPoint p;
  p.batch = batch;
  p.context = context;
  p.keep = keep;
  p.page_fraction = pages_held / double(lists * c.pages_per_seq);
  auto at_copy = [&](PagedDecodeArgs& a, int i) {  // rotate among the cache's copies: HBM, not L2
    a.k_pool = c.k.data() + (i % c.copies) * c.pool_elems;
    a.v_pool = c.v.data() + (i % c.copies) * c.pool_elems;
  };
  const int calls = std::max(c.copies, 100);
  p.us = graph_us_per_call(calls, [&](int i, cudaStream_t s) {
    at_copy(tok.attn, i);
    check(token_decode_attention(tok, s), "token_decode_attention");
  });
  p.pages_us = graph_us_per_call(calls, [&](int i, cudaStream_t s) {
    at_copy(pages, i);
    check(paged_decode_attention(pages, s), "paged_decode_attention");
  });
  p.dense_us = graph_us_per_call(calls, [&](int i, cudaStream_t s) { sb.attend(sb.dense, i, s); });
  p.bytes = 2.0 * lists * n * d * 2 + double(lists) * n * 4 + double(batch) * heads * d * (2 + 4) +
            double(batch) * heads * 4;
  return p;
}

ArtAttentionPoint bench_art_attention(int batch, int context, int heads, int kv_heads, int d, int round_pages,
                                      int patience, int lag, int max_warps) {
  RandomPagedCache c(batch, context, kv_heads, d);
  DeviceBuffer<uint16_t> q(size_t(batch) * heads * d);
  DeviceBuffer<float> o(size_t(batch) * heads * d), lse(size_t(batch) * heads);
  fill_random_bf16(q.data(), q.size(), 3, 1.0f, nullptr);
  PagedDecodeArgs dense = c.decode_args(heads, q.data(), o.data(), lse.data());
  // One list per (sequence, KV head): the sequence's pages in position order (full pages).
  const size_t lists = size_t(batch) * kv_heads;
  std::vector<int32_t> t(lists * c.pages_per_seq), l(lists, context);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < kv_heads; ++h)
      for (int i = 0; i < c.pages_per_seq; ++i) t[(size_t(b) * kv_heads + h) * c.pages_per_seq + i] = b * c.pages_per_seq + i;
  DeviceBuffer<int32_t> table, lens;
  upload(table, t.data(), t.size());
  upload(lens, l.data(), l.size());
  ArtDecodeArgs art{.attn = dense, .art = {.round_pages = round_pages, .patience = patience, .eps_scale = 1e30f,
                                           .eps_dir = 1e30f}};
  art.art.max_warps = max_warps;
  art.attn.tables_per_kv_head = true;
  art.attn.page_table = table.data();
  art.attn.seq_lens = lens.data();
  art.art.lag_rounds = lag > 0 ? lag : art_decode_lag(art);
  ArtBuffers buffers(art, std::max<size_t>(paged_decode_workspace_size(dense), 1));
  dense.workspace = art.attn.workspace;
  dense.workspace_bytes = art.attn.workspace_bytes;

  ArtAttentionPoint p;
  p.batch = batch;
  p.context = context;
  p.round_pages = round_pages;
  p.lag = art.art.lag_rounds;
  p.max_warps = max_warps;
  const int calls = std::max(c.copies, 100);
  p.us = graph_us_per_call(calls, [&](int i, cudaStream_t s) { attend_art(art, c, i, s); });
  p.dense_us = graph_us_per_call(calls, [&](int i, cudaStream_t s) {
    dense.k_pool = c.k.data() + (i % c.copies) * c.pool_elems;
    dense.v_pool = c.v.data() + (i % c.copies) * c.pool_elems;
    check(paged_decode_attention(dense, s), "paged_decode_attention");
  });
  ArtDecodeStats st;
  check(cudaMemcpy(&st, buffers.stats.data(), sizeof st, cudaMemcpyDeviceToHost), "cudaMemcpy");
  p.read_fraction = st.pages_listed ? double(st.pages_read) / double(st.pages_listed) : 1.0;
  const int rounds = (c.pages_per_seq + round_pages - 1) / round_pages;
  p.stop_round = patience < rounds - 1 ? patience : -1;
  p.bytes = c.kv_bytes() * p.read_fraction + double(batch) * heads * d * (2 + 4) + double(batch) * heads * 4;
  return p;
}

EndToEndPoint bench_end_to_end(std::shared_ptr<const GpuWeights> weights, int batch, int context, int steps, double copy_bw,
                               const std::string& label, int rectify_f, bool dense_fallback,
                               int host_kv_slots, bool host_kv_prefetch) {
  // "POLICY@hits=N": MAC rows hit N per mille of the time, forced (random weights give no
  // similar queries).
  const size_t at_hits = label.find("@hits=");
  const std::string policy = label.substr(0, at_hits);
  const int forced_hits = at_hits == std::string::npos ? -1 : std::stoi(label.substr(at_hits + 6));
  // A mixed batch: policies separated by ';', given to the sequences in turn.
  std::vector<std::string> mix;
  for (size_t at = 0; at <= policy.size();) {
    const size_t end = std::min(policy.find(';', at), policy.size());
    mix.push_back(policy.substr(at, end - at));
    at = end + 1;
  }
  const bool sparse = policy != "dense";
  const ModelConfig& c = weights->config;
  const int warm = 4;
  const KVCacheShape shape = bench_cache_shape(c, batch, context + warm + steps);
  const int pages_per_seq = shape.num_pages / batch;
  const size_t weight_total = weights->bytes();
  const size_t embed_bytes = weights->embed.data.bytes();
  const bool tied = weights->lm_head.rows == 0;
  GpuForwardOptions o;
  // A rectification is f rows per sequence, every sequence in one pass (the engine's chunk of
  // 2048 rows holds 64 sequences' f = 32).
  o.max_rows = sparse ? std::max(batch, rectify_f * batch) : batch;
  o.max_pages_per_seq = pages_per_seq;
  o.policy = mix[0];
  o.dense_fallback = dense_fallback;
  o.host_kv_slots = host_kv_slots;
  o.host_kv_prefetch = host_kv_prefetch;
  GpuForward fwd(weights, shape, o);
  fwd.cache().fill_random(7, fwd.stream());  // K/V and digests
  if (forced_hits >= 0) fwd.force_mac_hits(forced_hits);
  std::vector<int32_t> policies;
  for (int b = 0; b < batch; ++b) policies.push_back(fwd.acquire_policy(mix[size_t(b) % mix.size()]));

  std::vector<PageTable> tables(static_cast<size_t>(batch));
  std::vector<PageTable*> ptrs;
  for (PageTable& t : tables) {
    fwd.cache().pool().reserve(t, context);
    t.length = context;
    ptrs.push_back(&t);
  }
  fwd.bench_prompts(ptrs, policies);  // cs: a sample of random prompt queries for its tables
  std::vector<int32_t> first(size_t(batch), 1);
  fwd.decode_greedy(ptrs, first, warm, policies);  // captures the graph (cs: builds its tables), warms clocks
  const double counted0 = *fwd.decode_kv_bytes_read();
  const HostKVSlots::Totals host0 = fwd.host_kv_totals();
  const DecodeRun run = fwd.decode_greedy(ptrs, first, steps, policies);
  const double counted = *fwd.decode_kv_bytes_read() - counted0;
  const HostKVSlots::Totals host1 = fwd.host_kv_totals();

  EndToEndPoint p;
  p.batch = batch;
  p.context = context;
  p.steps = steps;
  if (host_kv_slots != 0) {  // a copy is one KV head's piece of a page, K and V
    p.host_slots = fwd.host_kv_slot_count();
    const double copies = double(host1.copies - host0.copies), hits = double(host1.hits - host0.hits);
    const double piece = 2.0 * shape.page_size * c.head_dim * sizeof(uint16_t);
    p.host_copy_bytes_per_step = copies * piece / steps;
    p.host_prefetch_bytes_per_step = double(host1.prefetched - host0.prefetched) * piece / steps;
    p.host_hit_rate = copies + hits > 0 ? hits / (copies + hits) : 0.0;
  }
  p.ms_per_step = run.seconds * 1e3 / steps;
  // A step reads every weight once, except the embedding table (only its rows for the batch's
  // tokens), which a tied model reads whole as the output projection.
  p.weight_bytes = double(tied ? weight_total : weight_total - embed_bytes);
  const int mean_len = context + warm + (steps + 1) / 2;
  // Rows falling back to dense read every key (a policy falls back at every step or none here:
  // the lengths hardly move).
  p.dense_fallback_rows = fwd.dense_fallback_rows();
  for (int32_t index : policies)
    p.kv_bytes += p.dense_fallback_rows > 0 ? fwd.dense_decode_bytes(mean_len) : fwd.decode_bytes_read(mean_len, index);
  // ART reads what its verdicts let it: the bytes counted (on the device) over the timed steps.
  // So does MAC: the cut lists' K/V and the rings scanned; and quest, whose union of its heads'
  // pages per KV head is data (issue 16's floor: the union; the planner's counts one head's
  // budget, about a third of it on random digests).
  if (policy.find("art") != std::string::npos || policy.find("mac") != std::string::npos ||
      policy.find("quest") != std::string::npos)
    p.kv_bytes = counted / steps;
  p.floor_ms = (p.weight_bytes + p.kv_bytes) / copy_bw * 1e3;
  if (sparse && rectify_f > 0) {
    // As Engine::rectify does it when every sequence is due in the same step: one prefill pass
    // over each sequence's last f tokens (the GPU forward attends densely in prefill), after one
    // warm-up round.
    auto dense = make_policy("dense");
    std::vector<float> none;
    auto rectify_all = [&] {
      ForwardBatch fb;
      for (PageTable* t : ptrs)
        for (int pos = t->length - rectify_f; pos < t->length; ++pos) {
          fb.tokens.push_back(int32_t((uint32_t(pos) * 2654435761u) % uint32_t(c.vocab_size)));
          fb.positions.push_back(pos);
          fb.tables.push_back(t);
        }
      fwd.run(fb, *dense, none);
    };
    rectify_all();
    const auto t0 = std::chrono::steady_clock::now();
    rectify_all();
    p.rectify_f = rectify_f;
    p.rectify_ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    p.rectify_ms_per_step = p.rectify_ms / rectify_f;
  }
  return p;
}

double bench_retro_steps(std::shared_ptr<const GpuWeights> weights, int batch, int context, int steps,
                         const std::string& base, int w, int host_kv_slots) {
  const ModelConfig& c = weights->config;
  const int warm = 4, page = 16;
  const int pages_per_seq = (context + warm + steps + page - 1) / page;
  KVCacheShape shape{.num_layers = c.num_layers, .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                     .page_size = page, .num_pages = pages_per_seq * batch};
  GpuForwardOptions o;
  o.max_rows = batch * w;
  o.max_pages_per_seq = pages_per_seq;
  o.policy = w > 1 ? fmt::format("{}+retro:w={}", base, w) : base;
  o.host_kv_slots = host_kv_slots;
  GpuForward fwd(weights, shape, o);
  fwd.cache().fill_random(7, fwd.stream());
  std::vector<PageTable> tables(static_cast<size_t>(batch));
  for (PageTable& t : tables) {
    fwd.cache().pool().reserve(t, context);
    t.length = context;
  }
  auto dense = make_policy("dense");  // run() ignores it: the forward plans by its own policy
  std::vector<float> logits;
  auto step = [&](int s) {  // as Engine::decode_batch: each sequence's past rows, then its newest
    ForwardBatch fb;
    fb.decode = true;
    for (PageTable& t : tables) {
      fwd.reserve(t, t.length + 1);
      const int past = std::min(w - 1, s);
      for (int j = past; j >= 1; --j) {
        fb.tokens.push_back(int32_t((uint32_t(t.length - j) * 2654435761u) % uint32_t(c.vocab_size)));
        fb.positions.push_back(t.length - j);
        fb.tables.push_back(&t);
        fb.retro_step.push_back(s - j);
      }
      fb.tokens.push_back(int32_t((uint32_t(t.length) * 2654435761u) % uint32_t(c.vocab_size)));
      fb.positions.push_back(t.length);
      fb.tables.push_back(&t);
      if (w > 1) fb.retro_step.push_back(s);
      fb.logits_rows.push_back(int(fb.tokens.size()) - 1);
    }
    fwd.run(fb, *dense, logits);
    for (PageTable& t : tables) t.length += 1;
  };
  for (int s = 0; s < warm; ++s) step(s);
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = warm; s < warm + steps; ++s) step(s);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3 / steps;
}

PrefillAttentionPoint bench_prefill_attention(int context, int rows, int heads, int kv_heads, int d,
                                              PrefillKernel kernel) {
  RandomPagedCache c(1, context, kv_heads, d);
  DeviceBuffer<uint16_t> q(size_t(rows) * heads * d);
  DeviceBuffer<float> o(size_t(rows) * heads * d), lse(size_t(rows) * heads);
  fill_random_bf16(q.data(), q.size(), 3, 1.0f, nullptr);
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  std::iota(pos.begin(), pos.end(), context - rows);
  DeviceBuffer<int32_t> positions;
  upload(positions, pos.data(), pos.size());
  DeviceBuffer<uint8_t> ws(std::max<size_t>(1, paged_prefill_workspace_size(rows, heads, kv_heads, d, context - 1)));
  PagedPrefillArgs a;
  a.n = rows;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = d;
  a.max_position = context - 1;
  a.scale = 1.0f / std::sqrt(float(d));
  a.q = q.data();
  a.page_table = c.table.data();
  a.positions = positions.data();
  a.o = o.data();
  a.lse = lse.data();
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();

  PrefillAttentionPoint p;
  p.context = context;
  p.rows = rows;
  p.kernel = kernel;
  double pairs = 0;  // row at position x sees x + 1 keys
  for (int x : pos) pairs += x + 1.0;
  p.flops = 4.0 * d * heads * pairs;
  p.bytes = c.kv_bytes() + double(rows) * heads * (d * (2 + 4) + 4);
  // Enough calls for ~5 TFLOP per graph (a whole 128K prompt is one call), rotating among the
  // cache copies so that short chunks read HBM.
  const int calls = int(std::clamp(std::ceil(5e12 / p.flops), 1.0, 200.0));
  p.us = graph_us_per_call(calls, [&](int i, cudaStream_t s) {
    a.k_pool = c.k.data() + (i % c.copies) * c.pool_elems;
    a.v_pool = c.v.data() + (i % c.copies) * c.pool_elems;
    check(paged_prefill_attention_with(a, kernel, s), "paged_prefill_attention");
  });
  return p;
}

double bench_prefill(std::shared_ptr<const GpuWeights> weights, int context, int chunk) {
  const ModelConfig& c = weights->config;
  const KVCacheShape shape = bench_cache_shape(c, 1, context);
  GpuForwardOptions o;
  o.max_rows = chunk;
  o.max_pages_per_seq = shape.num_pages;
  GpuForward fwd(weights, shape, o);
  PageTable table;
  fwd.cache().pool().reserve(table, context);
  std::vector<PageTable*> tables(size_t(chunk), &table);
  auto dense = make_policy("dense");  // the GPU forward attends densely itself
  std::vector<float> logits;
  const auto start = std::chrono::steady_clock::now();
  for (int b = 0; b < context; b += chunk) {
    ForwardBatch fb;
    for (int p = b; p < std::min(context, b + chunk); ++p) {
      fb.tokens.push_back(int32_t((uint32_t(p) * 2654435761u) % uint32_t(c.vocab_size)));
      fb.positions.push_back(p);
      fb.tables.push_back(&table);
    }
    fb.logits_rows.push_back(int(fb.tokens.size()) - 1);
    fwd.run(fb, *dense, logits);
    table.length = fb.positions.back() + 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return context / s;
}

ModelConfig llama31_8b_config() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = 500000.0f;
  c.rope.type = "llama3";
  c.rope.factor = 8.0f;
  c.rope.low_freq_factor = 1.0f;
  c.rope.high_freq_factor = 4.0f;
  c.rope.original_max_position_embeddings = 8192;
  return c;
}

KVCacheShape bench_cache_shape(const ModelConfig& c, int batch, int tokens) {
  KVCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.page_size = 16;
  shape.num_pages = (tokens + shape.page_size - 1) / shape.page_size * batch;
  return shape;
}

ModelConfig llama31_70b_config() {
  ModelConfig c = llama31_8b_config();
  c.hidden_size = 8192;
  c.intermediate_size = 28672;
  c.num_layers = 80;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  return c;
}

}  // namespace skim::cuda

namespace skim::cuda {

CsSelectPoint bench_cs_select(int batch, int context, int kv_heads, int d, double keep) {
  constexpr int M = 4, C = 64, kWindow = 64;
  const int ds = d / M, L = std::max(1, int(0.2 * context)), searches = batch * kv_heads;
  const size_t lists = size_t(searches) * M * C;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> centroids(lists * ds), tails(lists), queries(size_t(searches) * d);
  for (size_t l = 0; l < lists; ++l) {  // unit centroids
    double n2 = 0;
    for (int i = 0; i < ds; ++i) n2 += double(centroids[l * ds + i] = normal(rng)) * centroids[l * ds + i];
    for (int i = 0; i < ds; ++i) centroids[l * ds + i] = float(centroids[l * ds + i] / std::sqrt(n2));
    tails[l] = 0.1f * normal(rng);
  }
  for (float& x : queries) x = normal(rng);
  DeviceBuffer<float> dcent(centroids.size()), dtail(tails.size()), dq(queries.size());
  DeviceBuffer<int32_t> index(lists * L), sizes(lists);
  DeviceBuffer<uint16_t> score(lists * L);
  check(cudaMemcpy(dcent.data(), centroids.data(), dcent.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(dtail.data(), tails.data(), dtail.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(dq.data(), queries.data(), dq.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  const std::vector<int32_t> full(lists, L);
  check(cudaMemcpy(sizes.data(), full.data(), sizes.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  fill_random_cs_lists(index.data(), score.data(), lists, L, context, 12, nullptr);
  std::vector<CsTablesView> views;
  for (int s = 0; s < searches; ++s) {
    const size_t l0 = size_t(s) * M * C;
    views.push_back({dcent.data() + l0 * ds, index.data() + l0 * L, score.data() + l0 * L, sizes.data() + l0,
                     dtail.data() + l0});
  }
  DeviceBuffer<CsTablesView> dviews(views.size());
  check(cudaMemcpy(dviews.data(), views.data(), dviews.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  const std::vector<int32_t> ctx(searches, context), wb(searches, std::max(0, context - kWindow)),
      n_pick(searches, std::max(1, int(keep * context)));
  DeviceBuffer<int32_t> dctx(searches), dwb(searches), dn(searches), picks(size_t(searches) * wb[0] + 1),
      counts(searches);
  check(cudaMemcpy(dctx.data(), ctx.data(), dctx.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(dwb.data(), wb.data(), dwb.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(dn.data(), n_pick.data(), dn.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  DeviceBuffer<CsSelectStats> stats(1);
  check(cudaMemset(stats.data(), 0, stats.bytes()), "cudaMemset");
  CsSelectArgs a{.searches = searches, .head_dim = d, .subspaces = M, .centroids = C, .list_capacity = L,
                 .score_dot = true, .missing_mean = true, .backoff = 0.3, .backoff_top = 2, .queries = dq.data(),
                 .tables = dviews.data(), .context = dctx.data(), .window_begin = dwb.data(), .n_pick = dn.data(),
                 .max_picks = wb[0], .picks = picks.data(), .pick_counts = counts.data(), .stats = stats.data()};
  const size_t ws_bytes = cs_select_workspace_size(a, context);
  DeviceBuffer<uint8_t> ws(std::max<size_t>(ws_bytes, 1));
  check(cudaMemset(ws.data(), 0, ws.bytes()), "cudaMemset");
  const CsSelectWorkspace workspace{ws.data(), ws_bytes, context};
  check(cs_select(a, workspace, nullptr), "cs_select");  // once with statistics, outside the timing
  CsSelectStats st{};
  check(cudaMemcpy(&st, stats.data(), sizeof(st), cudaMemcpyDeviceToHost), "cudaMemcpy");
  a.stats = nullptr;
  CsSelectPoint p;
  p.batch = batch;
  p.context = context;
  p.list_capacity = L;
  p.keep = keep;
  p.us = graph_us_per_call(20, [&](int, cudaStream_t s) { check(cs_select(a, workspace, s), "cs_select"); });
  p.table_bytes = double(st.table_bytes);
  p.candidates = double(st.candidates) / searches;
  p.backoff_fraction = double(st.backoffs) / std::max<double>(1, double(st.subspace_searches));
  return p;
}

}  // namespace skim::cuda
