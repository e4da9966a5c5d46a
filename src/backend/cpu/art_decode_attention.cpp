#include "backend/cpu/art_decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "backend/cpu/art_stability.h"
#include "backend/cpu/attend.h"
#include "attention/attention_state.h"
#include "core/dtype.h"

namespace skim::cpu {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The reference's shapes are the CUDA kernel's; the fp32 kernel (the CPU policy's) takes any
// head_dim, page size and group, and rounds of any number of pages.
template <class Elem>
void check(const ArtDecodeArgsOf<Elem>& args) {
  constexpr bool kReference = !std::is_same_v<Elem, float>;
  const PagedDecodeArgsOf<Elem>& a = args.attn;
  const ArtDecodeParams& p = args.art;
  if (a.batch < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      a.page_size <= 0 || a.head_dim <= 0 || !a.tables_per_kv_head)
    throw std::invalid_argument("art_decode_attention: bad shapes (per-KV-head lists)");
  if (kReference && (a.head_dim % 64 != 0 || a.head_dim > 128 || a.page_size != 16 || a.group_size() > kArtMaxGroup))
    throw std::invalid_argument("art_decode_attention: head_dim 64/128, pages of 16, groups of at most 8 heads");
  if (p.round_pages <= 0 || (kReference && p.round_pages % kArtBlockPages != 0) || p.lag_rounds < 0 ||
      p.patience < 1 || p.block_pages < 1)
    throw std::invalid_argument("art_decode_attention: round_pages a positive multiple of 4, lag >= 0, patience >= 1");
}

// Row b's rule: the call's, or its policy's (ArtRowRule; lag at least the call's). False: the
// row is read whole (another policy's row).
template <class Args>
bool row_rule(const Args& args, int b, ArtDecodeParams& p) {
  p = args.art;
  if (!args.rules) return true;
  const ArtRowRule& r = args.rules[args.row_policy[b]];
  p.round_pages = r.round_pages;
  p.lag_rounds = std::max(r.lag_rounds, args.art.lag_rounds);
  p.patience = r.patience;
  p.eps_scale = r.eps_scale;
  p.eps_dir = r.eps_dir;
  if (r.active && (p.round_pages < args.art.round_pages || p.round_pages % kArtBlockPages != 0 || p.patience < 1))
    throw std::invalid_argument("art_decode_attention: a row's rule out of range");
  return r.active != 0;
}

// The state of one query head over a set of keys: o normalised, lse (natural log), double.
struct State {
  std::vector<double> o;
  double lse = kNegInf;
  void merge(const State& b) {
    if (b.lse == kNegInf) return;
    if (lse == kNegInf) {
      *this = b;
      return;
    }
    const double m = std::max(lse, b.lse), wa = std::exp(lse - m), wb = std::exp(b.lse - m);
    for (size_t i = 0; i < o.size(); ++i) o[i] = (wa * o[i] + wb * b.o[i]) / (wa + wb);
    lse = m + std::log(wa + wb);
  }
};

// One list of one sequence: its pages, their token counts (the first may be partial), and the
// query head's attention over a range of them.
struct List {
  const PagedDecodeArgs& a;
  const int32_t* table;
  const uint32_t* masks;
  int h, n_pages, partial_valid, partial;  // the partial page: its tokens and place in the list

  int valid(int i) const { return i == partial ? partial_valid : a.page_size; }
  State attend(const std::vector<float>& q, int g, int begin, int end) const {
    const int d = a.head_dim;
    State st;
    st.o.assign(size_t(d), 0.0);
    std::vector<double> s;
    std::vector<const uint16_t*> vs;
    double m = kNegInf;
    for (int i = begin; i < end; ++i) {
      if (masks && !(masks[i] >> g & 1u)) continue;
      for (int t = 0; t < valid(i); ++t) {
        const size_t off = size_t(table[i]) * a.page_stride_elems() + h * a.head_stride_elems() + size_t(t) * d;
        double dot = 0;
        for (int k = 0; k < d; ++k) dot += double(q[size_t(k)]) * bf16_to_f32(a.k_pool[off + k]);
        s.push_back(dot * a.scale);
        vs.push_back(a.v_pool + off);
        m = std::max(m, s.back());
      }
    }
    if (s.empty()) return st;
    double sum = 0;
    for (size_t j = 0; j < s.size(); ++j) {
      const double w = std::exp(s[j] - m);
      sum += w;
      for (int k = 0; k < d; ++k) st.o[size_t(k)] += w * bf16_to_f32(vs[j][k]);
    }
    for (double& x : st.o) x /= sum;
    st.lse = m + std::log(sum);
    return st;
  }
};

// ART's test of one head between rounds on the probe of its normalised output.
struct HeadTest {
  std::vector<double> prev;
  double prev_norm = 0;
  int run = 0;
  void test(const State& cur, int d, const ArtDecodeParams& p) {
    std::vector<double> probe(kArtProbe);
    double norm = 0, dot = 0;
    for (int e = 0; e < kArtProbe; ++e) {
      probe[size_t(e)] = cur.o[size_t(art_probe_dim(e, d))];
      norm += probe[size_t(e)] * probe[size_t(e)];
    }
    norm = std::sqrt(norm);
    bool stable = false;
    if (prev_norm > 0 && norm > 0) {
      for (int e = 0; e < kArtProbe; ++e) dot += prev[size_t(e)] * probe[size_t(e)];
      stable = std::fabs(norm - prev_norm) / prev_norm < p.eps_scale && 1.0 - dot / (norm * prev_norm) < p.eps_dir;
    }
    run = stable ? run + 1 : 0;
    prev = probe;
    prev_norm = norm;
  }
};

}  // namespace

void art_decode_attention(const ArtDecodeArgs& args) {
  check(args);
  const PagedDecodeArgs& a = args.attn;
  const int d = a.head_dim, group = a.group_size(), ps = a.page_size;
  std::vector<float> q(static_cast<size_t>(d));
  for (int b = 0; b < a.batch; ++b) {
    ArtDecodeParams p;
    const bool active = row_rule(args, b, p);
    for (int h = 0; h < a.num_kv_heads; ++h) {
      const size_t list = a.table_index(b, h);
      const int len = a.seq_lens[list];
      if (len < 0 || len > a.max_pages_per_seq * ps) throw std::invalid_argument("art_decode_attention: seq_len out of range");
      const int n_pages = (len + ps - 1) / ps;
      const List l{a, a.page_table + list * a.max_pages_per_seq,
                   a.head_masks ? a.head_masks + list * a.max_pages_per_seq : nullptr, h, n_pages,
                   len - (n_pages - 1) * ps, active ? 0 : n_pages - 1};
      // The list's round and lag (art_list_round_pages: longer rounds in a long list).
      const int rp = art_list_round_pages(p.round_pages, n_pages, kArtBlockPages);
      const int lag = art_list_lag(p.lag_rounds, p.round_pages, rp);
      const int n_rounds = (n_pages + rp - 1) / rp;
      std::vector<std::vector<float>> qs(static_cast<size_t>(group));
      for (int g = 0; g < group; ++g) {
        const uint16_t* qb = a.q + (size_t(b) * a.num_heads + h * group + g) * d;
        for (int k = 0; k < d; ++k) q[size_t(k)] = bf16_to_f32(qb[k]);
        qs[size_t(g)] = q;
      }
      // The tests, round by round, on the running state of each head (blocks merged in order).
      // Heads start empty: zero output, lse -inf (a masked head may see no key for a while).
      std::vector<State> run(static_cast<size_t>(group), State{std::vector<double>(static_cast<size_t>(d), 0.0)});
      std::vector<HeadTest> tests(static_cast<size_t>(group));
      const uint32_t listed = art_heads_listed(l.masks, n_pages, group);  // heads without a page: stable
      if (args.heads_listed && args.heads_listed[list] != listed)
        throw std::invalid_argument("art_decode_attention: heads_listed differs from the list's masks");
      int stop = -1;
      for (int r = 0; active && r + 1 < n_rounds && stop < 0; ++r) {
        bool all = true;
        for (int g = 0; g < group; ++g) {
          for (int blk = r * rp; blk < std::min(n_pages, (r + 1) * rp); blk += kArtBlockPages)
            run[size_t(g)].merge(l.attend(qs[size_t(g)], g, blk, std::min(n_pages, blk + kArtBlockPages)));
          tests[size_t(g)].test(run[size_t(g)], d, p);
          all = all && (!(listed >> g & 1u) || tests[size_t(g)].run >= p.patience);
        }
        if (all) stop = r;
      }
      const int read_rounds = stop < 0 ? n_rounds : std::min(n_rounds, stop + lag + 1);
      const int read = std::min(n_pages, read_rounds * rp);
      for (int g = 0; g < group; ++g) {
        const State st = l.attend(qs[size_t(g)], g, 0, read);
        const size_t head = size_t(b) * a.num_heads + h * group + g;
        for (int k = 0; k < d; ++k) a.o[head * d + k] = float(st.o[size_t(k)]);
        a.lse[head] = float(st.lse);
      }
      if (args.list_pages_read) args.list_pages_read[list] = read;
      if (args.stats && active) {
        args.stats->lists += 1;
        args.stats->stopped += read < n_pages;
        args.stats->pages_listed += unsigned(n_pages);
        args.stats->pages_read += unsigned(read);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// fp32: the CPU engine's kernel. The same rule; each block's keys read once for the heads that
// attend them (attend), the running states merged block by block in fp32.

namespace {

// One (sequence, KV head) list over the fp32 cache. Its pages as a table: list position t is
// row t % page_size of page table[t / page_size], so page k of the list holds positions
// [k * ps, k * ps + valid(k)); the partial page is the first (an ART row) or the last.
struct F32List {
  const PagedDecodeArgsF32& a;
  SeqKV kv;
  const uint32_t* masks;  // null: every head every page
  int n_pages, partial, partial_valid;

  int valid(int k) const { return k == partial ? partial_valid : a.page_size; }
  // The positions of pages [p0, p1) that head g attends (g < 0: every page), a range per page.
  void ranges(int p0, int p1, int g, std::vector<KeyRange>& out) const {
    out.clear();
    for (int k = p0; k < p1; ++k)
      if (g < 0 || !masks || (masks[k] >> g & 1u)) out.push_back({k * a.page_size, k * a.page_size + valid(k)});
  }
  // Whether every head attends every page of [p0, p1).
  bool shared(int p0, int p1, int group) const {
    const uint32_t all = group >= 32 ? ~0u : (1u << group) - 1;
    for (int k = p0; masks && k < p1; ++k)
      if ((masks[k] & all) != all) return false;
    return true;
  }
};

// The list's heads read pages [p0, p1) into their running states (os, lses).
void read_pages(const F32List& l, const float* qs, int group, int p0, int p1, float* os, float* lses,
                std::vector<KeyRange>& ranges, std::vector<float>& bo, std::vector<float>& blse) {
  const int d = l.a.head_dim;
  if (l.shared(p0, p1, group)) {
    l.ranges(p0, p1, -1, ranges);
    if (ranges.empty()) return;
    attend(qs, group, l.kv, ranges, l.a.scale, bo.data(), blse.data());
    for (int g = 0; g < group; ++g) merge_state(os + size_t(g) * d, lses[g], bo.data() + size_t(g) * d, blse[size_t(g)], d);
    return;
  }
  for (int g = 0; g < group; ++g) {
    l.ranges(p0, p1, g, ranges);
    if (ranges.empty()) continue;
    attend(qs + size_t(g) * d, 1, l.kv, ranges, l.a.scale, bo.data(), blse.data());
    merge_state(os + size_t(g) * d, lses[g], bo.data(), blse[0], d);
  }
}

// ART over one list: rounds of round_pages (longer in a long list: art_list_round_pages) in
// blocks of block_pages, the group's test after every round but the last until it stops, then
// the lag (art_list_lag) more. Returns the pages read.
int traverse(const F32List& l, const float* qs, int group, const ArtDecodeParams& p, bool active, float* os,
             float* lses) {
  const int d = l.a.head_dim, n = l.n_pages;
  for (int g = 0; g < group; ++g) clear_state(os + size_t(g) * d, lses[g], d);
  std::vector<KeyRange> ranges;
  std::vector<float> bo(size_t(group) * d), blse(static_cast<size_t>(group)), prev(size_t(group) * d);
  std::vector<int> run(static_cast<size_t>(group), 0);
  const ArtStability test(d, !p.full_test);
  const uint32_t listed = art_heads_listed(l.masks, n, group);  // heads without a page: stable
  const int rp = active ? art_list_round_pages(p.round_pages, n, p.block_pages) : std::max(n, 1);
  const int n_rounds = (n + rp - 1) / rp, lag = art_list_lag(p.lag_rounds, p.round_pages, rp);
  int rounds = n_rounds;  // to read: all, or up to the stop plus the lag
  for (int r = 0; r < rounds; ++r) {
    std::copy_n(os, size_t(group) * d, prev.data());
    const int end = std::min(n, (r + 1) * rp);
    for (int k = r * rp; k < end; k += p.block_pages)
      read_pages(l, qs, group, k, std::min(end, k + p.block_pages), os, lses, ranges, bo, blse);
    if (!active || rounds < n_rounds || r + 1 == n_rounds) continue;  // tested until the list stops
    bool all = true;
    for (int g = 0; g < group; ++g) {
      const bool st = test.stable(prev.data() + size_t(g) * d, os + size_t(g) * d, p.eps_scale, p.eps_dir);
      run[size_t(g)] = st ? run[size_t(g)] + 1 : 0;
      all = all && (!(listed >> g & 1u) || run[size_t(g)] >= p.patience);
    }
    if (all) rounds = std::min(n_rounds, r + 1 + lag);
  }
  return std::min(n, rounds * rp);
}

}  // namespace

void art_decode_attention(const ArtDecodeArgsF32& args) {
  check(args);
  const PagedDecodeArgsF32& a = args.attn;
  if (a.page_stride != 0 || a.head_stride != 0 || (a.head_masks && a.group_size() > 32))
    throw std::invalid_argument("art_decode_attention (fp32): the default pool layout, masks for groups of <= 32");
  const int group = a.group_size(), ps = a.page_size, lists = a.batch * a.num_kv_heads;
  std::vector<int> reads(static_cast<size_t>(lists), 0), actives(static_cast<size_t>(lists), 0);
  std::vector<ArtDecodeParams> rules(static_cast<size_t>(a.batch));
  for (int b = 0; b < a.batch; ++b) actives[size_t(b)] = row_rule(args, b, rules[size_t(b)]);
  for (int i = 0; i < lists; ++i)
    if (a.seq_lens[i] < 0 || a.seq_lens[i] > a.max_pages_per_seq * ps)
      throw std::invalid_argument("art_decode_attention: seq_len out of range");
  std::vector<float> lse_scratch(a.lse ? 0 : size_t(a.batch) * a.num_heads);
  float* lse = a.lse ? a.lse : lse_scratch.data();
#pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < lists; ++i) {
    const int b = i / a.num_kv_heads, h = i % a.num_kv_heads, len = a.seq_lens[i];
    const int n = (len + ps - 1) / ps;
    const bool active = actives[size_t(b)] != 0;
    const int32_t* table = a.page_table + size_t(i) * a.max_pages_per_seq;
    const F32List l{a, SeqKV{KVLayerView{.k = a.k_pool, .v = a.v_pool, .num_kv_heads = a.num_kv_heads,
                                         .head_dim = a.head_dim, .page_size = ps},
                             table, h},
                    a.head_masks ? a.head_masks + size_t(i) * a.max_pages_per_seq : nullptr, n, active ? 0 : n - 1,
                    len - (n - 1) * ps};
    const size_t head = size_t(b) * a.num_heads + size_t(h) * group;
    reads[size_t(i)] = traverse(l, a.q + head * a.head_dim, group, rules[size_t(b)], active, a.o + head * a.head_dim,
                                lse + head);
  }
  for (int i = 0; i < lists; ++i) {
    const int n = (a.seq_lens[i] + ps - 1) / ps;
    if (args.list_pages_read) args.list_pages_read[i] = reads[size_t(i)];
    if (!args.stats || !actives[size_t(i / a.num_kv_heads)]) continue;
    args.stats->lists += 1;
    args.stats->stopped += reads[size_t(i)] < n;
    args.stats->pages_listed += unsigned(n);
    args.stats->pages_read += unsigned(reads[size_t(i)]);
  }
}

}  // namespace skim::cpu
