// MAC decode as plan + kernel (mac.h, attention/mac_decode_args.h): what the GPU runs, on the
// CPU's kernels. Per layer of a decode batch:
//   match:  each (row, query head)'s nearest ring entry, a hit or a miss (MacReuse::match);
//   plan:   the base policy's page plan, cut at each row's prefix end into a `below` and an
//           `above` list per (row, KV head), a hit head's pages being its band+tail
//           (cpu::mac_page_plan); with ART (mac+art on the group rule) the cut is of ART's
//           visiting plan and `below` comes in ART's order (MacPagePlanArgs::art_order);
//   kernel: paged decode attention over each list, every page read once for the group (ART's
//           kernel over `below` with ART);
//   merge:  the state cached for m = reused prefix + below; output = that + above
//           (cpu::mac_merge_states); the row's new ring entry.
#include <algorithm>
#include <tuple>

#include "attention/pipeline.h"
#include "attention/selectors.h"
#include "attention/attention_state.h"
#include "backend/cpu/mac_decode.h"
#include "backend/cpu/paged_decode_attention.h"
#include "backend/cpu/token_decode_attention.h"
#include "core/error.h"

namespace skim {

namespace {

// Paged decode attention over `plan` (per (row, KV head) lists with masks) into o and lse.
void attend_list(const AttentionBatch& b, const PagePlan& plan, float* o, float* lse) {
  cpu::paged_decode_attention(PagedDecodeArgsF32{
      .batch = b.num_rows, .num_heads = b.num_heads, .num_kv_heads = b.num_kv_heads, .head_dim = b.head_dim,
      .page_size = b.kv.page_size, .max_pages_per_seq = plan.max_pages, .scale = b.scale,
      .tables_per_kv_head = true, .q = b.q, .k_pool = b.kv.k, .v_pool = b.kv.v, .page_table = plan.table.data(),
      .seq_lens = plan.lens.data(), .head_masks = plan.head_masks.data(), .o = o, .lse = lse});
}

}  // namespace

// Each row's nearest ring entry per query head: a hit's band start and cached state into the
// buffers (band_begin -1 and the empty state for a miss). Adds the bytes read to `meta`.
void PipelinePolicy::match_mac(const AttentionBatch& b, uint64_t& meta) {
  MacReuse& mac = *config_.mac;
  const int H = b.num_heads, d = b.head_dim, rows = b.num_rows;
  MacBuffers& m = mac_buffers_;
  m.matches.resize(size_t(H));
  m.band_begin.assign(size_t(rows) * H, -1);
  m.cache_o.assign(size_t(rows) * H * d, 0.0f);
  m.cache_lse.assign(size_t(rows) * H, kEmptyLse);
  for (int r = 0; r < rows; ++r) {
    const bool matched = mac.match(b, r, m.matches.data());
    if (matched) meta += uint64_t(mac.ring_size(b.tables[r], b.layer)) * H * d * sizeof(float);  // the queries matched
    for (int h = 0; h < H; ++h) {
      const MacReuse::Match& x = m.matches[size_t(h)];
      if (matched) mac.record(b.layer, h, x, b.positions[r], H);
      if (!x.hit) continue;
      const size_t i = size_t(r) * H + h;
      m.band_begin[i] = x.prefix;
      std::copy_n(mac.cached_o(b, r, x.slot, h), d, m.cache_o.data() + i * d);
      m.cache_lse[i] = mac.cached_lse(b, r, x.slot, h);
      meta += uint64_t(d + 1) * sizeof(float);  // the cached state read
    }
  }
}

// The states of below and above into the cached states and the output; the rows' ring entries.
void PipelinePolicy::merge_mac(const AttentionBatch& b) {
  MacBuffers& m = mac_buffers_;
  const int H = b.num_heads, d = b.head_dim;
  cpu::mac_merge_states({.batch = b.num_rows, .num_heads = H, .head_dim = d, .below_o = m.below_o.data(),
                         .below_lse = m.below_lse.data(), .above_o = m.above_o.data(),
                         .above_lse = m.above_lse.data(), .cache_o = m.cache_o.data(),
                         .cache_lse = m.cache_lse.data(), .out = b.out});
  for (int r = 0; r < b.num_rows; ++r)
    config_.mac->push(b, r, m.cache_o.data() + size_t(r) * H * d, m.cache_lse.data() + size_t(r) * H);
}

void PipelinePolicy::attend_mac_plan(const AttentionBatch& b, const PagePlan& base, bool sparse,
                                     const PagePlan* visiting) {
  MacReuse& mac = *config_.mac;
  const int H = b.num_heads, d = b.head_dim, rows = b.num_rows;
  MacBuffers& m = mac_buffers_;
  uint64_t meta = base.metadata_bytes;
  uint64_t context = 0;
  for (int r = 0; r < rows; ++r) context += uint64_t(b.positions[r] + 1) * b.num_kv_heads;
  match_mac(b, meta);

  DenseSelector().plan(b, m.rows);  // the rows' own tables in the plan's layout
  const int lists = rows * b.num_kv_heads, stride = m.rows.max_pages;
  // mac+art cuts ART's visiting plan (the same pages as the base's), `below` in ART's order.
  const PagePlan& cut = visiting ? *visiting : base;
  SKIM_REQUIRE(cut.max_pages <= stride, "mac: the base plan's stride {} exceeds its rows' {}", cut.max_pages, stride);
  for (PagePlan* p : {&m.below, &m.above}) {
    p->reset(true, lists, stride);
    p->head_masks.assign(p->table.size(), 0u);
  }
  cpu::mac_page_plan({.batch = rows, .num_heads = H, .num_kv_heads = b.num_kv_heads, .page_size = b.kv.page_size,
                      .max_pages_per_seq = stride, .band = mac.params().band, .page_table = m.rows.table.data(),
                      .seq_lens = m.rows.lens.data(), .base_per_kv_head = cut.per_kv_head,
                      .base_table = cut.table.data(), .base_lens = cut.lens.data(),
                      .base_masks = cut.head_masks.empty() ? nullptr : cut.head_masks.data(),
                      .art_order = visiting != nullptr, .band_begin = m.band_begin.data(), .below_table = m.below.table.data(),
                      .below_lens = m.below.lens.data(), .above_table = m.above.table.data(),
                      .above_lens = m.above.lens.data(), .below_masks = m.below.head_masks.data(),
                      .above_masks = m.above.head_masks.data()});
  m.below_o.resize(size_t(rows) * H * d);
  m.above_o.resize(m.below_o.size());
  m.below_lse.resize(size_t(rows) * H);
  m.above_lse.resize(m.below_lse.size());
  uint64_t keys = 0;  // per (row, KV head) the union of its heads' pages: what a GQA kernel loads
  if (visiting) {
    keys += run_art_kernel(b, m.below, m.below_o.data(), m.below_lse.data());
  } else {
    attend_list(b, m.below, m.below_o.data(), m.below_lse.data());
    for (int i = 0; i < lists; ++i) keys += uint64_t(m.below.lens[size_t(i)]);
  }
  attend_list(b, m.above, m.above_o.data(), m.above_lse.data());
  merge_mac(b);
  for (int i = 0; i < lists; ++i) keys += uint64_t(m.above.lens[size_t(i)]);
  stats_.add_decode_call(keys, meta, uint64_t(rows), context);
  if (sparse && has_selection_observer()) notify_plan(b, base);
}

}  // namespace skim

namespace skim {

namespace {

// Appends the positions of `list` (ascending) in [lo, hi) to out[n...].
void append_clipped(const int32_t* list, int len, int lo, int hi, int32_t* out, int32_t& n) {
  const int32_t* first = std::lower_bound(list, list + len, lo);
  for (const int32_t* t = first; t != list + len && *t < hi; ++t) out[n++] = *t;
}

}  // namespace

// MAC over a per-token base (cs): the base's token plan, cut per query head at the row's prefix
// end into `below` and `above` lists (a hit head's lists being its band+tail), the token kernel
// over each, then the same merge as over pages.
void PipelinePolicy::attend_mac_tokens(const AttentionBatch& b, Selector& selector, bool sparse) {
  const MacReuse& mac = *config_.mac;
  const int H = b.num_heads, d = b.head_dim, rows = b.num_rows, group = H / b.num_kv_heads;
  MacBuffers& m = mac_buffers_;
  DecodeCounts counts;
  plan_tokens(b, selector, sparse, counts);
  uint64_t meta = counts.metadata;
  match_mac(b, meta);
  const int max_pages = flatten_row_pages(b);
  for (TokenPlan* p : {&m.below_tokens, &m.above_tokens}) p->reset(true, rows * H, tokens_.max_tokens);
  std::vector<int32_t>& band = m.band_tokens;
  band.resize(size_t(tokens_.max_tokens));
  uint64_t keys = 0;
  std::vector<uint8_t>& read = m.read_keys;  // per (row, KV head): the keys any head of the group reads
  for (int r = 0; r < rows; ++r) {
    const int ctx = b.positions[r] + 1, split = mac.prefix_end(ctx - 1, b.kv.page_size);
    for (int h = 0; h < b.num_kv_heads; ++h) {
      read.assign(size_t(ctx), 0);
      for (int g = 0; g < group; ++g) {
        const int hq = h * group + g;
        const size_t i = size_t(r) * H + hq;
        const int begin = m.band_begin[i];
        const int32_t* list = band.data();
        int len = 0;
        if (begin >= 0) {  // a hit: the band+tail [begin, ctx)
          for (int t = begin; t < ctx; ++t) band[size_t(len++)] = t;
        } else {
          const int base = tokens_.per_query_head ? r * H + hq : r * b.num_kv_heads + h;
          list = tokens_.list(base);
          len = tokens_.lens[size_t(base)];
        }
        m.below_tokens.lens[i] = m.above_tokens.lens[i] = 0;
        append_clipped(list, len, 0, split, m.below_tokens.list(int(i)), m.below_tokens.lens[i]);
        append_clipped(list, len, split, ctx, m.above_tokens.list(int(i)), m.above_tokens.lens[i]);
        for (int j = 0; j < len; ++j) read[size_t(list[j])] = 1;
      }
      for (uint8_t x : read) keys += x;
    }
  }
  m.below_o.resize(size_t(rows) * H * d);
  m.above_o.resize(m.below_o.size());
  m.below_lse.resize(size_t(rows) * H);
  m.above_lse.resize(m.below_lse.size());
  for (auto [plan, o, lse] : {std::tuple{&m.below_tokens, m.below_o.data(), m.below_lse.data()},
                               std::tuple{&m.above_tokens, m.above_o.data(), m.above_lse.data()}})
    cpu::token_decode_attention({.attn = row_pages_args(b, max_pages, o, lse), .max_tokens = plan->max_tokens,
                                 .lists_per_query_head = true, .token_lists = plan->table.data(),
                                 .token_lens = plan->lens.data()});
  merge_mac(b);
  stats_.add_decode_call(keys, meta, uint64_t(rows), counts.context);
}

}  // namespace skim
