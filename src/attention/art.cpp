#include "attention/art.h"

#include <algorithm>
#include <cmath>

#include "attention/art_decode_args.h"
#include "attention/attention_state.h"
#include "attention/policy_registry.h"
#include "attention/policy_spec.h"
#include "core/error.h"

namespace skim {

void art_blocks_in_order(const std::vector<KeyRange>& ranges, int block, ArtPlan& plan) {
  std::vector<KeyRange> cur;
  int filled = 0;
  for (KeyRange r : ranges) {
    while (r.begin < r.end) {
      const int take = std::min(r.end - r.begin, block - filled);
      cur.push_back({r.begin, r.begin + take});
      r.begin += take;
      filled += take;
      if (filled == block) {
        plan.blocks.push_back(std::move(cur));
        cur.clear();
        filled = 0;
      }
    }
  }
  if (!cur.empty()) plan.blocks.push_back(std::move(cur));
}


void art_blocks_recent(KeyRange range, int block, ArtPlan& plan) {
  for (int end = range.end; end > range.begin; end -= block)
    plan.blocks.push_back({KeyRange{std::max(range.begin, end - block), end}});
}

namespace {

// The stability test of ART on elements [0, n) with the given stride.
struct Stability {
  bool stable(const float* prev, const float* cur, int n, int stride, double prev_norm, double eps_scale,
              double eps_dir, double& cur_norm) const {
    double dot = 0, nc = 0;
    for (int i = 0; i < n; i += stride) {
      dot += double(prev[i]) * cur[i];
      nc += double(cur[i]) * cur[i];
    }
    cur_norm = std::sqrt(nc);
    if (prev_norm <= 0 || cur_norm <= 0) return false;
    const double scale = std::fabs(cur_norm - prev_norm) / prev_norm;
    const double dir = 1.0 - dot / (prev_norm * cur_norm);
    return scale < eps_scale && dir < eps_dir;
  }
};

double strided_norm(const float* v, int n, int stride) {
  double s = 0;
  for (int i = 0; i < n; i += stride) s += double(v[i]) * v[i];
  return std::sqrt(s);
}

}  // namespace

ArtResult art_traverse(const float* q, const SeqKV& kv, float scale, int d, const ArtParams& p, const ArtPlan& plan,
                       float* o, float& lse, int split, float* split_o, float* split_lse) {
  ArtResult res;
  res.blocks = int(plan.blocks.size());
  std::vector<float> bo(static_cast<size_t>(d)), prev(static_cast<size_t>(d));
  float blse = kEmptyLse;
  const int probe_stride = std::max(1, d / std::max(1, p.probe));

  // Attends `ranges`, merging into the running state and, below `split`, the split state.
  auto read = [&](const std::vector<KeyRange>& ranges) {
    for (int part = 0; part < (split_o ? 2 : 1); ++part) {
      std::vector<KeyRange> rs;
      for (KeyRange r : ranges) {
        KeyRange x = r;
        if (split_o) x = part == 0 ? KeyRange{r.begin, std::min(r.end, split)} : KeyRange{std::max(r.begin, split), r.end};
        if (x.end > x.begin) rs.push_back(x);
      }
      if (rs.empty()) continue;
      attend(q, 1, kv, rs, scale, bo.data(), &blse);
      merge_state(o, lse, bo.data(), blse, d);
      if (split_o && part == 0) merge_state(split_o, *split_lse, bo.data(), blse, d);
      res.read.insert(res.read.end(), rs.begin(), rs.end());
    }
  };

  if (!plan.pinned.empty()) read(plan.pinned);
  double prev_full = lse == kEmptyLse ? 0 : strided_norm(o, d, 1);
  double prev_probe = lse == kEmptyLse ? 0 : strided_norm(o, d, probe_stride);
  int run_full = 0, run_probe = 0;
  Stability st;
  const size_t round = size_t(std::max(1, p.round));
  for (size_t j = 0; j < plan.blocks.size(); ++j) {
    if (j % round == 0) std::copy_n(o, d, prev.data());  // the state the round's test compares to
    read(plan.blocks[j]);
    res.visited += 1;
    if ((j + 1) % round != 0 && j + 1 < plan.blocks.size()) continue;  // tested at the round's end
    double nf = 0, np = 0;
    const bool sf = st.stable(prev.data(), o, d, 1, prev_full, p.eps_scale, p.eps_dir, nf);
    const bool sp = st.stable(prev.data(), o, d, probe_stride, prev_probe, p.eps_scale, p.eps_dir, np);
    prev_full = nf;
    prev_probe = np;
    res.stable_disagree += sf != sp;
    run_full = sf ? run_full + 1 : 0;
    run_probe = sp ? run_probe + 1 : 0;
    if (run_probe >= p.patience && res.probe_stop < 0) res.probe_stop = int(j);
    if (run_full >= p.patience) {
      res.full_stop = int(j);
      res.stopped = j + 1 < plan.blocks.size();
      break;
    }
  }
  return res;
}

void ArtStats::add(const ArtResult& r) {
  traversals += 1;
  stopped += r.stopped;
  stop_disagree += r.probe_stop != r.full_stop;
  blocks_tested += uint64_t(r.visited);
  stable_disagree += uint64_t(r.stable_disagree);
  visited_fraction += r.blocks > 0 ? double(r.visited) / double(r.blocks) : 1.0;
}

void ArtStats::add_counters(std::map<std::string, double>& c) const {
  if (traversals == 0) return;
  const double n = double(traversals);
  c["art_visited_fraction"] = visited_fraction / n;
  c["art_early_stop_rate"] = double(stopped) / n;
  c["art_probe_stop_disagree"] = double(stop_disagree) / n;
  c["art_probe_block_disagree"] = blocks_tested ? double(stable_disagree) / double(blocks_tested) : 0.0;
}

ArtParams art_params(const std::string& text, const PolicyPart& p, const PolicyPart* selector, bool with_mac) {
  ArtParams a;
  p.read("eps_scale", a.eps_scale, "eps_dir", a.eps_dir, "patience", a.patience, "block", a.block, "round", a.round,
         "lag", a.lag, "warps", a.warps);
  const bool dense = !selector || selector->name == "dense";
  SKIM_REQUIRE(dense || !p.has("order"),
               "policy '{}': art:order chooses the order for a dense base; {} traverses in its own order", text,
               selector ? selector->name : "");
  const std::string o = p.text("order", "group");
  a.dense_order = o == "bound" ? ArtOrder::Bound : o == "group" ? ArtOrder::GroupBound : ArtOrder::Recent;
  // The heads of a group stop together only along one shared order: a dense base in the group's
  // order, a selection made for the whole group (gbsa, resa, streaming), or quest's union in the
  // order of its pages' best bound (each head attending its own pages of it).
  const bool shared = dense ? a.dense_order == ArtOrder::GroupBound
                            : selector->name == "gbsa" || selector->name == "resa" ||
                                  selector->name == "streaming" || selector->name == "quest";
  a.group_stop = p.text("stop", shared && !with_mac ? "group" : "head") == "group";
  if (a.group_stop && !p.has("round")) a.round = kArtGroupRound;  // method_defaults.h says why
  if (a.group_stop && !p.has("patience")) a.patience = kArtGroupPatience;
  a.probe_test = p.text("test", "probe") == "probe";
  SKIM_REQUIRE(!a.group_stop || shared,
               "policy '{}': art:stop=group needs one order per GQA group: art:order=group over a dense base, or "
               "gbsa/resa/streaming/quest", text);
  SKIM_REQUIRE(a.group_stop || !p.has("lag"), "policy '{}': art:lag is the GPU rule's, with art:stop=group", text);
  return a;
}

PolicyInfo art_policy_info() {
  const ArtParams a;
  return {.name = "art", .summary = "ART: visit keys block by block and stop once the running output is stable",
          .stage = PolicyStage::Traversal,
          .keys = {number_key("eps_scale", a.eps_scale, 0, kNoUpperBound, "stable: relative change of the running output's norm below this"),
                   number_key("eps_dir", a.eps_dir, 0, 2, "... and 1 - cos of the running outputs before and after the block below this"),
                   integer_key("patience", a.patience, 1, kNoUpperBound,
                               "stop after this many consecutive stable tests (stop=group: 2 by default)"),
                   choice_key("order", "group", {"recent", "bound", "group"},
                              "block order for a dense base: recent first, by each head's page bound, or by its "
                              "GQA group's (one order per KV head, as a GPU kernel reads pages)"),
                   integer_key("block", a.block, 1, 1 << 20, "tokens per block"),
                   integer_key("round", a.round, 1, 1 << 16,
                               "blocks per stability test (patience counts tests): a GPU kernel's round (stop=group: "
                               "8 by default, each test a verdict the kernel waits on)"),
                   choice_key("stop", "group", {"head", "group"},
                              "group: the heads of a GQA group that share an order stop together, once all are "
                              "stable (the GPU kernel's rule; the default where they share one: a dense base in "
                              "order=group, gbsa, resa, streaming, quest); head: each query head stops on its own "
                              "(the default elsewhere: cs, oracle, mac, order=bound or recent); with mac, group runs ART "
                              "over the keys below each row's prefix end (MAC's recomputed prefix for a miss, a "
                              "hit's band there) and reads the rest whole"),
                   choice_key("test", "probe", {"full", "probe"},
                              "with stop=group: the stability test on the GPU kernel's 32-element probe or on the "
                              "full output vector (stop=head tests the full vector)"),
                   integer_key("lag", a.lag, 0, 1 << 16,
                               "with stop=group: rounds read past the stopping round (the GPU kernel's lag)"),
                   integer_key("warps", a.warps, 0, 1 << 16,
                               "GPU only: the kernel's warps per list (0: the decode kernel's split); fewer read "
                               "less past a stop and stream more slowly")},
          .composes_with = {"dense", "streaming", "quest", "oracle", "gbsa", "resa", "cs", "mac"},
          .order = "the base's order; for a dense base art:order",
          // On the GPU with stop=group,test=probe over dense (order=group), gbsa or resa: the
          // planner refuses the rest with the reason.
          .backends = {"cpu", "cuda"}};
}

}  // namespace skim
