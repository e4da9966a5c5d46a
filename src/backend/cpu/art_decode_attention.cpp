#include "backend/cpu/art_decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/dtype.h"

namespace skim::cpu {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check(const ArtDecodeArgs& args) {
  const PagedDecodeArgs& a = args.attn;
  const ArtDecodeParams& p = args.art;
  if (a.batch < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      a.head_dim % 64 != 0 || a.head_dim > 128 || a.page_size != 16 || !a.tables_per_kv_head)
    throw std::invalid_argument("art_decode_attention: bad shapes (head_dim 64/128, pages of 16, per-KV-head lists)");
  if (a.group_size() > kArtMaxGroup) throw std::invalid_argument("art_decode_attention: groups of at most 8 heads");
  if (p.round_pages <= 0 || p.round_pages % kArtBlockPages != 0 || p.lag_rounds < 0 || p.patience < 1)
    throw std::invalid_argument("art_decode_attention: round_pages a positive multiple of 4, lag >= 0, patience >= 1");
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
    // The row's rule: the call's, or its policy's (ArtRowRule; lag at least the call's).
    ArtDecodeParams p = args.art;
    bool active = true;
    if (args.rules) {
      const ArtRowRule& r = args.rules[args.row_policy[b]];
      active = r.active != 0;
      p.round_pages = r.round_pages;
      p.lag_rounds = std::max(r.lag_rounds, args.art.lag_rounds);
      p.patience = r.patience;
      p.eps_scale = r.eps_scale;
      p.eps_dir = r.eps_dir;
      if (active && (p.round_pages < args.art.round_pages || p.round_pages % kArtBlockPages != 0 || p.patience < 1))
        throw std::invalid_argument("art_decode_attention: a row's rule out of range");
    }
    for (int h = 0; h < a.num_kv_heads; ++h) {
      const size_t list = a.table_index(b, h);
      const int len = a.seq_lens[list];
      if (len < 0 || len > a.max_pages_per_seq * ps) throw std::invalid_argument("art_decode_attention: seq_len out of range");
      const int n_pages = (len + ps - 1) / ps;
      const List l{a, a.page_table + list * a.max_pages_per_seq,
                   a.head_masks ? a.head_masks + list * a.max_pages_per_seq : nullptr, h, n_pages,
                   len - (n_pages - 1) * ps, active ? 0 : n_pages - 1};
      const int n_rounds = (n_pages + p.round_pages - 1) / p.round_pages;
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
      int stop = -1;
      for (int r = 0; active && r + 1 < n_rounds && stop < 0; ++r) {
        bool all = true;
        for (int g = 0; g < group; ++g) {
          for (int blk = r * p.round_pages; blk < std::min(n_pages, (r + 1) * p.round_pages); blk += kArtBlockPages)
            run[size_t(g)].merge(l.attend(qs[size_t(g)], g, blk, std::min(n_pages, blk + kArtBlockPages)));
          tests[size_t(g)].test(run[size_t(g)], d, p);
          all = all && tests[size_t(g)].run >= p.patience;
        }
        if (all) stop = r;
      }
      const int read_rounds = stop < 0 ? n_rounds : std::min(n_rounds, stop + p.lag_rounds + 1);
      const int read = std::min(n_pages, read_rounds * p.round_pages);
      for (int g = 0; g < group; ++g) {
        const State st = l.attend(qs[size_t(g)], g, 0, read);
        const size_t head = size_t(b) * a.num_heads + h * group + g;
        for (int k = 0; k < d; ++k) a.o[head * d + k] = float(st.o[size_t(k)]);
        a.lse[head] = float(st.lse);
      }
      if (args.stats && active) {
        args.stats->lists += 1;
        args.stats->stopped += read < n_pages;
        args.stats->pages_listed += unsigned(n_pages);
        args.stats->pages_read += unsigned(read);
      }
    }
  }
}

}  // namespace skim::cpu
