// Decode through the traverse (ART) stage per query head (art:stop=head: each head its own order
// and its own stop; the group rule is pipeline_art.cpp's plan + kernel), with the reuse (MAC)
// stage before it when the policy has both (DESIGN.md section 3): select -> MAC match -> ART ->
// merge -> ring update. Hit or miss is decided per query head, so each head has its own keys.
//
// Per head, the keys read for the output are the band+tail [prefix(p), m+1) on a MAC hit and the
// base selection on a miss (or with no MAC). The keys are visited in blocks in the base's order
// (MAC hit: most recent first) and the traversal may stop early; keys it skips are skipped in the
// cached state as well. With MAC the state cached for m is the reused prefix (or nothing) merged
// with the part read below split = prefix(m) (mac.h), and the output is that merged with the
// part from the split on. The pipeline sends only the layers where ART runs here: the layers a
// sparse selector keeps dense (`dense_layers`) go through the plans, exact.
#include <algorithm>
#include <cmath>

#include "attention/pipeline.h"
#include "attention/attention_state.h"
#include "backend/cpu/group_page_select.h"
#include "backend/cpu/page_digest.h"
#include "core/error.h"

namespace skim {

namespace {

// The parts of `ranges` in [lo, hi), in their order.
std::vector<KeyRange> clip(const std::vector<KeyRange>& ranges, int lo, int hi) {
  std::vector<KeyRange> out;
  for (KeyRange r : ranges) {
    KeyRange x{std::max(r.begin, lo), std::min(r.end, hi)};
    if (x.end > x.begin) out.push_back(x);
  }
  return out;
}

// Descending Quest bound of the head's query over the pages its ranges cover, the newest page
// first (it holds the query's own key): dense+art with art:order=bound.
std::vector<KeyRange> by_bound(const AttentionBatch& b, int row, int kv_head, int head,
                               const std::vector<KeyRange>& ranges) {
  const int ps = b.kv.page_size, d = b.head_dim, ctx = b.positions[row] + 1;
  const int32_t* pages = b.tables[row]->pages.data();
  const float* q = b.q + (size_t(row) * b.num_heads + head) * d;
  std::vector<std::pair<float, int>> scored;
  for (KeyRange r : coalesce_ranges(ranges))
    for (int p = r.begin / ps; p * ps < r.end; ++p) {
      if (!scored.empty() && scored.back().second == p) continue;  // two ranges in one page
      float s = p == (ctx - 1) / ps ? INFINITY
                                    : page_bound(q, page_kmin(b.kv, pages[p], kv_head), page_kmax(b.kv, pages[p], kv_head), d);
      scored.push_back({s, p});
    }
  std::stable_sort(scored.begin(), scored.end(), [](auto& a, auto& c) { return a.first > c.first; });
  std::vector<KeyRange> out;
  for (auto [s, p] : scored)
    for (KeyRange c : clip(ranges, p * ps, (p + 1) * ps)) out.push_back(c);
  return out;
}

// Most recent first: ranges by descending start, each cut from its end backwards.
void recent_blocks(std::vector<KeyRange> ranges, int block, ArtPlan& plan) {
  std::sort(ranges.begin(), ranges.end(), [](KeyRange a, KeyRange c) { return a.begin > c.begin; });
  for (KeyRange r : ranges) art_blocks_recent(r, block, plan);
}

uint64_t count_keys(const std::vector<KeyRange>& r) {
  uint64_t n = 0;
  for (KeyRange x : r) n += uint64_t(std::max(0, x.end - x.begin));
  return n;
}

}  // namespace

void PipelinePolicy::attend_heads(const AttentionBatch& b, Selector& selector, bool sparse) {
  const int group = b.num_heads / b.num_kv_heads, d = b.head_dim, H = b.num_heads;
  MacReuse* mac = config_.mac.get();
  const ArtOrder order = config_.selector ? config_.art_order : config_.art->dense_order;

  struct Head {
    int row = 0, head = 0;
    std::vector<KeyRange> ranges;  // the output's keys (after any reused prefix), priority order
    ArtOrder order = ArtOrder::Given;
    int split = 0;                 // MAC: keys below it also go into the new ring entry's state
    MacReuse::Match match;
    std::vector<KeyRange> read;
  };
  std::vector<Head> heads;
  heads.reserve(size_t(b.num_rows) * H);
  Selection sel;
  std::vector<MacReuse::Match> matches(static_cast<size_t>(H));
  uint64_t meta = 0, context = 0;
  for (int r = 0; r < b.num_rows; ++r) {
    const int ctx = b.positions[r] + 1;
    bool matched = false;
    if (mac) {
      matched = mac->match(b, r, matches.data());
      if (matched) meta += uint64_t(mac->ring_size(b.tables[r], b.layer)) * H * d * sizeof(float);  // the queries matched
    }
    for (int h = 0; h < b.num_kv_heads; ++h) {
      sel.heads.clear();
      sel.metadata_bytes = 0;
      selector.select(SelectInput{b, r, h, ctx, true}, sel);
      if (sparse) notify_selection(b, r, h, sel.heads);
      meta += sel.metadata_bytes;
      context += uint64_t(ctx);
      const bool by_pages = order == ArtOrder::Bound || order == ArtOrder::GroupBound;
      if (by_pages) meta += uint64_t((ctx + b.kv.page_size - 1) / b.kv.page_size) * 2 * d * sizeof(float);
      // art:order=group: every page of the row by the bound of the group's mean query, the
      // newest first: gbsa's ranking keeping every page (cpu::group_pages_by_bound), the order
      // a GPU kernel would read them in for the whole group.
      std::vector<KeyRange> group_order;
      if (order == ArtOrder::GroupBound) {
        const std::vector<int32_t>& pages = b.tables[r]->pages;
        const GroupPageSelectArgsF32 a{.batch = 1, .num_heads = H, .num_kv_heads = b.num_kv_heads, .head_dim = d,
                                       .page_size = b.kv.page_size, .max_pages_per_seq = int(pages.size()),
                                       .keep = 1.0, .n_min = 1, .n_local = 1, .q = b.q + size_t(r) * H * d,
                                       .kmin = b.kv.kmin, .kmax = b.kv.kmax, .page_table = pages.data(),
                                       .seq_lens = &ctx};
        group_order = page_ranges(cpu::group_pages_by_bound(a, 0, h), b.kv.page_size, ctx);
      }
      for (int g = 0; g < group; ++g) {
        Head x;
        x.row = r;
        x.head = h * group + g;
        x.ranges = sel.heads[sel.shared() ? 0 : size_t(g)];
        x.order = order;
        if (mac) {
          x.split = mac->prefix_end(ctx - 1, b.kv.page_size);
          x.match = matches[size_t(x.head)];
          if (matched) mac->record(b.layer, x.head, x.match, b.positions[r], H);
          if (x.match.hit) {  // the band+tail, most recent first; the cached state is read
            meta += uint64_t(d + 1) * sizeof(float);
            x.ranges = {KeyRange{x.match.prefix, ctx}};
            x.order = ArtOrder::Recent;
          }
        }
        if (x.order == ArtOrder::Bound) x.ranges = by_bound(b, r, h, x.head, x.ranges);
        if (x.order == ArtOrder::GroupBound) x.ranges = group_order;  // a dense base: every key
        heads.push_back(std::move(x));
      }
    }
  }

  // States start as the reused prefix on a hit, empty otherwise.
  std::vector<float> cache_o(size_t(b.num_rows) * H * d, 0.0f), cache_lse(size_t(b.num_rows) * H, kEmptyLse);
  for (const Head& x : heads)
    if (mac && x.match.hit) {
      const size_t i = size_t(x.row) * H + x.head;
      std::copy_n(mac->cached_o(b, x.row, x.match.slot, x.head), d, cache_o.data() + i * d);
      cache_lse[i] = mac->cached_lse(b, x.row, x.match.slot, x.head);
    }

  const ArtParams& p = *config_.art;
  std::vector<ArtResult> results(heads.size());
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < heads.size(); ++i) {
    Head& x = heads[i];
    ArtPlan plan;
    if (x.order == ArtOrder::Recent) {
      recent_blocks(x.ranges, p.block, plan);
    } else if (x.order == ArtOrder::Streaming && !x.ranges.empty()) {
      recent_blocks({x.ranges[0]}, p.block, plan);  // the window; the rest are sinks
      plan.pinned.assign(x.ranges.begin() + 1, x.ranges.end());
    } else {
      art_blocks_in_order(x.ranges, p.block, plan);
    }
    const size_t s = size_t(x.row) * H + x.head;
    float* o = b.out + s * d;
    float lse = cache_lse[s];
    std::copy_n(cache_o.data() + s * d, d, o);
    SeqKV kv{b.kv, b.tables[x.row]->pages.data(), x.head / group};
    const float* q = b.q + s * d;
    results[i] = art_traverse(q, kv, b.scale, d, p, plan, o, lse, x.split, mac ? cache_o.data() + s * d : nullptr,
                              mac ? cache_lse.data() + s : nullptr);
    x.read = std::move(results[i].read);
  }
  for (const ArtResult& r : results) art_stats_.add(r);

  if (mac)
    for (int r = 0; r < b.num_rows; ++r)
      mac->push(b, r, cache_o.data() + size_t(r) * H * d, cache_lse.data() + size_t(r) * H);

  // Keys read per (row, KV head): the union over the group's heads, what a GQA kernel loads.
  uint64_t keys = 0;
  for (size_t i = 0; i < heads.size(); i += size_t(group)) {
    std::vector<KeyRange> all;
    for (int g = 0; g < group; ++g) all.insert(all.end(), heads[i + g].read.begin(), heads[i + g].read.end());
    keys += count_keys(coalesce_ranges(std::move(all)));
  }
  stats_.add_decode_call(keys, meta, uint64_t(b.num_rows), context);
}

}  // namespace skim
