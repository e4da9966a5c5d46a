#include "backend/cuda/decode_planner.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "attention/art.h"
#include "attention/csattn.h"
#include "attention/mac.h"
#include "attention/retro.h"
#include "attention/policy_registry.h"
#include "attention/policy_spec.h"
#include "attention/selectors.h"
#include "backend/cuda/window_page_plan.cuh"
#include "backend/cuda/group_page_select.cuh"
#include "backend/cuda/quest_page_select.cuh"
#include "core/error.h"

namespace skim::cuda {

namespace {

double kv_bytes_per_token(const PlannerShape& s) { return 2.0 * s.num_kv_heads * s.head_dim * sizeof(uint16_t); }

PlanRows rows_of(const PlanInput& in, uint32_t rows) { return {in.row_policy, rows}; }

// The dense fallback's thresholds for cs (RowPlanner::dense_below; gbsa's and quest's below), in
// tokens left unread per step summed over the policy's rows, measured on the H100 with the 8B
// shape at keep and list 0.05 (bench/results/2026-11-27-h100-pending/, -gemv-mma-cs-branch/): a
// search every step (about 79 us a layer of search and streaming insert at batch 1) lost 13% to
// dense at 32K batch 1 (31K tokens unread), won 5.5% at 128K (124K) and 32% at batch 8 and 32K
// (250K); a search every 4 steps lost 5% at 32K and won 19% at 128K. Interpolated, the two cross
// dense near 96K and 50K tokens. A sequence whose tables exist stays on cs
// (GpuForward::dense_policies).
constexpr int kCsDenseBelow = 98304;
constexpr int kCsStep4DenseBelow = 49152;

// CSAttention: its dense layers attend every key; the others attend the token plan the forward's
// CsState makes (DevicePlan::cs), so nothing is planned here. Its bytes: the keys it keeps
// (keep x length, at least the window) and the list entries a search reads (M subspaces' lists
// of at most list x length entries, 6 bytes each; the back-off's more are not counted).
class CsRows final : public RowPlanner {
 public:
  CsRows(const PlannerShape& s, const CsParams& p) : s_(s), p_(p) {}
  bool dense_in(int layer) const override { return layer < p_.dense_layers; }
  void select(const PlanInput&, uint32_t, const Out&, cudaStream_t) override {}
  double bytes_read(int layer, int length) const override {
    if (dense_in(layer)) return length * kv_bytes_per_token(s_);
    return kept(length) * kv_bytes_per_token(s_) + metadata_bytes(layer, length);
  }
  int skipped_tokens(int length) const override { return length - kept(length); }
  int dense_below() const override { return p_.step >= 4 ? kCsStep4DenseBelow : kCsDenseBelow; }
  double metadata_bytes(int layer, int length) const override {
    if (dense_in(layer)) return 0;
    const double entries = p_.list <= 1.0 ? std::ceil(p_.list * length) : p_.list;
    // A search every `step` steps reads its lists: a step's share of them (the keys read between
    // searches, the last picks plus those since, stay those of the keep x context above).
    return double(s_.num_kv_heads) * p_.subspaces * entries * 6.0 / std::max(1, p_.step);
  }
  const CsParams* cs_params() const override { return &p_; }

 private:
  int kept(int length) const {
    return std::min(length, std::max({1, int(std::ceil(p_.keep * length)), std::min(length, p_.window)}));
  }
  PlannerShape s_;
  CsParams p_;
};

// Sinks plus a recent window of pages (streaming), or every key (dense: no window; passed
// through as the step's own page tables when no row of the step selects): window_page_plan.
class WindowRows final : public RowPlanner {
 public:
  // With an ART rule the lists come in ART's visiting order (recent_first): the newest page,
  // the sinks, the window newest first.
  WindowRows(const PlannerShape& s, int sink, int window, std::optional<ArtRowRule> art = std::nullopt)
      : s_(s), sink_(sink), window_(window), art_(art) {}
  bool dense_in(int) const override { return window_ == 0 && !art_; }
  void select(const PlanInput& in, uint32_t rows, const Out& out, cudaStream_t stream) override {
    check(window_page_plan({.batch = in.n, .num_kv_heads = s_.num_kv_heads, .page_size = s_.page_size,
                            .max_pages_per_seq = s_.max_pages_per_seq, .sink = sink_, .window = window_,
                            .recent_first = art_.has_value(), .page_table = in.page_table,
                            .seq_lens = in.seq_lens, .out_table = out.table, .out_masks = out.masks,
                            .out_lens = out.lens, .rows = rows_of(in, rows)},
                           stream),
          "window_page_plan");
  }
  const ArtRowRule* art_rule() const override { return art_ ? &*art_ : nullptr; }
  // ART's K/V are counted on the device (the pages it read).
  double host_bytes(int layer, int length) const override { return art_ ? 0.0 : bytes_read(layer, length); }
  int list_tokens(int max_seq_len) const override {
    if (window_ == 0) return max_seq_len;
    const int ps = s_.page_size;  // the sink pages, the window's, and one for its alignment
    return std::min(max_seq_len, ((sink_ + ps - 1) / ps + (window_ + ps - 1) / ps + 1) * ps);
  }
  double bytes_read(int, int length) const override {
    // The sink pages whole, then every key from the window's first page to the end.
    const WindowPages w = window_pages(length, s_.page_size, sink_, window_);
    return (w.sinks * s_.page_size + length - w.first * s_.page_size) * kv_bytes_per_token(s_);
  }

 private:
  PlannerShape s_;
  int sink_ = 0, window_ = 0;
  std::optional<ArtRowRule> art_;
};

// The dense fallback's thresholds (RowPlanner::dense_below): tokens left unread per step, summed
// over a policy's rows, below which its selection kernels cost more than the reads they save.
// Measured on the H100 with the 8B shape at keep / budget 0.1 (bench/results/2026-11-26-h100-pending/):
// gbsa (two kernels) lost 1.5% to dense at 8K batch 1 (7.4K tokens skipped) and won 10% at 32K
// (29.5K); quest (three kernels, and a union wider than one head's budget) lost 6% at 8K and won
// 1.6% at 32K; at batch 8 (8 x 7.4K) both won at 8K.
constexpr int kGroupDenseBelow = 12288;
constexpr int kQuestDenseBelow = 24576;

// A selection kernel's rows: the first dense_layers layers attend every key; the others the
// pages the kernel keeps (and the digests it reads). How many a head keeps is the subclass's.
class SelectionRows : public RowPlanner {
 public:
  bool dense_in(int layer) const final { return layer < dense_layers_; }
  int skipped_tokens(int length) const final {
    const int ps = s_.page_size, pages = (length + ps - 1) / ps;
    return length - std::min(length, head_pages(pages, length) * ps);
  }
  int list_tokens(int max_seq_len) const final {
    const int ps = s_.page_size;
    return std::min(max_seq_len, list_pages((max_seq_len + ps - 1) / ps, max_seq_len) * ps);
  }
  double bytes_read(int layer, int length) const final {
    if (dense_in(layer)) return length * kv_bytes_per_token(s_);
    const int ps = s_.page_size, pages = (length + ps - 1) / ps;
    return std::min(length, head_pages(pages, length) * ps) * kv_bytes_per_token(s_) + digest_bytes(length);
  }
  double digest_bytes(int length) const {
    const int ps = s_.page_size, pages = (length + ps - 1) / ps;
    return double(pages) * s_.num_kv_heads * s_.head_dim * 2 * sizeof(uint16_t);
  }
  double metadata_bytes(int layer, int length) const final { return dense_in(layer) ? 0 : digest_bytes(length); }

 protected:
  SelectionRows(const PlannerShape& s, int dense_layers) : s_(s), dense_layers_(dense_layers) {}
  // Pages one head keeps of `pages` (`length` tokens), and at most one list's.
  virtual int head_pages(int pages, int length) const = 0;
  virtual int list_pages(int pages, int length) const { return head_pages(pages, length); }

  PlannerShape s_;
  int dense_layers_ = 0;
};

// ReSA's group block-sparse selection: group_page_select, one list per (row, KV head).
class GroupPageRows final : public SelectionRows {
 public:
  // With an ART rule, the lists come in bound order (by_score), the newest page first.
  GroupPageRows(const PlannerShape& s, const GroupBlockParams& p, int dense_layers, const std::string& policy,
                std::optional<ArtRowRule> art = std::nullopt)
      : SelectionRows(s, dense_layers), p_(p), art_(art) {
    workspace_ = group_page_select_workspace_size(args(PlanInput{.n = s.max_rows}, 0, Out{}));
    SKIM_REQUIRE(workspace_ > 0, "policy {}: keep {} / n_min {} / n_local {} out of the GPU selection's range",
                 policy, p.keep, p.n_min, p.n_local);
  }
  size_t workspace_bytes() const override { return workspace_; }
  void select(const PlanInput& in, uint32_t rows, const Out& out, cudaStream_t stream) override {
    check(group_page_select(args(in, rows, out), stream), "group_page_select");
  }
  int dense_below() const override { return art_ ? 0 : kGroupDenseBelow; }  // ART's order is its own
  const ArtRowRule* art_rule() const override { return art_ ? &*art_ : nullptr; }
  // ART's K/V are counted on the device (the pages it read); the digests here.
  double host_bytes(int layer, int length) const override {
    return art_ && !dense_in(layer) ? digest_bytes(length) : bytes_read(layer, length);
  }

 private:
  int head_pages(int pages, int) const override { return group_pages_kept(pages, p_.keep, p_.n_min); }
  GroupPageSelectArgs args(const PlanInput& in, uint32_t rows, const Out& out) const {
    return {.batch = in.n, .num_heads = s_.num_heads, .num_kv_heads = s_.num_kv_heads, .head_dim = s_.head_dim,
            .page_size = s_.page_size, .max_pages_per_seq = s_.max_pages_per_seq, .keep = p_.keep,
            .n_min = p_.n_min, .n_local = p_.n_local, .by_score = art_.has_value(), .q = in.q, .kmin = in.kmin,
            .kmax = in.kmax,
            .page_table = in.page_table, .seq_lens = in.seq_lens, .out_table = out.table,
            .out_lens = out.lens, .out_masks = out.masks, .rows = rows_of(in, rows),
            .workspace = out.workspace, .workspace_bytes = out.workspace_bytes};
  }

  GroupBlockParams p_;
  std::optional<ArtRowRule> art_;
  size_t workspace_ = 0;
};


// Quest: quest_page_select, per (row, KV head) the union of its heads' pages with a mask per
// query head.
class QuestPageRows final : public SelectionRows {
 public:
  // With an ART rule the union comes in ART's visiting order (by_score), and ART counts the
  // pages it reads on the device instead of the union.
  QuestPageRows(const PlannerShape& s, const QuestParams& p, int dense_layers, const std::string& policy,
                std::optional<ArtRowRule> art = std::nullopt)
      : SelectionRows(s, dense_layers), p_(p), art_(art) {
    workspace_ = quest_page_select_workspace_size(args(PlanInput{.n = s.max_rows}, 0, Out{}));
    SKIM_REQUIRE(workspace_ > 0,
                 "policy {}: budget {} / min {} out of the GPU selection's range (or more than 32 query heads "
                 "per KV head)", policy, p.budget, p.min_tokens);
  }
  bool writes_masks() const override { return true; }
  size_t workspace_bytes() const override { return workspace_; }
  // The union's K/V are counted on the device (listed_tokens); the digests here.
  double host_bytes(int layer, int length) const override {
    return dense_in(layer) ? bytes_read(layer, length) : digest_bytes(length);
  }
  void select(const PlanInput& in, uint32_t rows, const Out& out, cudaStream_t stream) override {
    QuestPageSelectArgs a = args(in, rows, out);
    if (art_) a.listed_tokens = nullptr;
    check(quest_page_select(a, stream), "quest_page_select");
  }
  const ArtRowRule* art_rule() const override { return art_ ? &*art_ : nullptr; }
  int dense_below() const override { return art_ ? 0 : kQuestDenseBelow; }

 private:
  int head_pages(int pages, int length) const override {
    return std::min(pages, quest_pages_kept(p_.budget, p_.min_tokens, length, s_.page_size));
  }
  int list_pages(int pages, int length) const override {
    return std::min(pages, s_.num_heads / s_.num_kv_heads * head_pages(pages, length));
  }
  QuestPageSelectArgs args(const PlanInput& in, uint32_t rows, const Out& out) const {
    return {.batch = in.n, .num_heads = s_.num_heads, .num_kv_heads = s_.num_kv_heads, .head_dim = s_.head_dim,
            .page_size = s_.page_size, .max_pages_per_seq = s_.max_pages_per_seq, .budget = p_.budget,
            .min_tokens = p_.min_tokens, .by_score = art_.has_value(), .q = in.q, .kmin = in.kmin, .kmax = in.kmax,
            .page_table = in.page_table,
            .seq_lens = in.seq_lens, .out_table = out.table, .out_masks = out.masks, .out_lens = out.lens,
            .rows = rows_of(in, rows), .listed_tokens = out.listed_tokens, .workspace = out.workspace,
            .workspace_bytes = out.workspace_bytes};
  }

  QuestParams p_;
  std::optional<ArtRowRule> art_;
  size_t workspace_ = 0;
};

}  // namespace

// ART on the GPU runs the kernel's rule (cuda::art_decode_attention), which the CPU policy runs
// with stop=group and test=probe (their defaults wherever the rule applies): both devices read
// the keys through art_params and run one rule.
ArtRowRule gpu_art_rule(const std::string& policy, const PolicyPart& art, const PolicyPart* base,
                        bool with_mac) {
  const ArtParams a = art_params(policy, art, base, with_mac);
  SKIM_REQUIRE(a.group_stop && a.probe_test,
               "policy {}: art on the GPU stops a GQA group's heads together on the 32-element probe "
               "(art:stop=group,test=probe{})", policy,
               with_mac ? "; with mac write art:stop=group: its CPU default stops each head alone" : ", the defaults");
  SKIM_REQUIRE((base && base->name != "dense") || a.dense_order == ArtOrder::GroupBound,
               "policy {}: art over a dense base on the GPU reads in the group's order: art:order=group", policy);
  SKIM_REQUIRE(a.block == 64, "policy {}: art:block is 64 tokens (4 pages) on the GPU", policy);
  SKIM_REQUIRE(a.round * 4 <= 128, "policy {}: art:round is at most 32 blocks on the GPU", policy);
  return ArtRowRule{.active = 1, .round_pages = a.round * 4, .lag_rounds = a.lag, .patience = a.patience,
                    .eps_scale = float(a.eps_scale), .eps_dir = float(a.eps_dir), .max_warps = a.warps};
}

namespace {

// A stage around a base policy's rows (MAC, RetroAttention): the base plans, the forward runs
// the stage's pipeline over the plan; everything the planner asks goes to the base unless the
// stage says otherwise.
class StageRows : public RowPlanner {
 public:
  explicit StageRows(std::unique_ptr<RowPlanner> base) : base_(std::move(base)) {}
  bool dense_in(int layer) const override { return base_->dense_in(layer); }
  bool writes_masks() const override { return base_->writes_masks(); }
  size_t workspace_bytes() const override { return base_->workspace_bytes(); }
  void select(const PlanInput& in, uint32_t rows, const Out& out, cudaStream_t stream) override {
    base_->select(in, rows, out, stream);
  }
  int list_tokens(int max_seq_len) const override { return base_->list_tokens(max_seq_len); }
  double bytes_read(int layer, int length) const override { return base_->bytes_read(layer, length); }
  double host_bytes(int layer, int length) const override { return base_->host_bytes(layer, length); }
  double metadata_bytes(int layer, int length) const override { return base_->metadata_bytes(layer, length); }

 protected:
  std::unique_ptr<RowPlanner> base_;
};

// MAC over a base's plan: the forward cuts each row's lists at its prefix end and merges with
// the rings (mac_decode.cuh). The base's digests are counted here; the K/V of the cut lists and
// the rings' bytes on the device.
class MacRows final : public StageRows {
 public:
  // mac+art: the base is ART's planner (its lists in visiting order), whose rule this row runs
  // over `below`, which mac_page_plan then lists in ART's order (art_order).
  MacRows(std::unique_ptr<RowPlanner> base, const MacParams& p)
      : StageRows(std::move(base)),
        rule_{.active = 1, .window = p.window, .band = p.band, .tau = float(p.tau), .min_context = p.min_context,
              .art_order = base_->art_rule() ? 1 : 0} {}
  const ArtRowRule* art_rule() const override { return base_->art_rule(); }
  void select(const PlanInput& in, uint32_t rows, const Out& out, cudaStream_t stream) override {
    Out o = out;
    o.listed_tokens = nullptr;  // the cut lists are counted instead (mac_page_plan)
    base_->select(in, rows, o, stream);
  }
  double host_bytes(int layer, int length) const override { return base_->metadata_bytes(layer, length); }
  const MacRowRule* mac_rule() const override { return &rule_; }

 private:
  MacRowRule rule_;
};

std::unique_ptr<RowPlanner> make_selection_planner(const std::string& policy, const PolicySpec& spec,
                                                   const PlannerShape& shape);

// RetroAttention over a base's plan (quest, gbsa, resa): the base plans the newest rows, the
// forward lists each past row's unseen pages (retro_decode.cuh) and merges with its cached
// state. The supplements' K/V are counted on the device.
class RetroRows final : public StageRows {
 public:
  RetroRows(std::unique_ptr<RowPlanner> base, const RetroRowRule& rule) : StageRows(std::move(base)), rule_(rule) {}
  const RetroRowRule* retro_rule() const override { return &rule_; }

 private:
  RetroRowRule rule_;
};

// The rows planner of a policy string's selector (dense when it has none). The registry's
// `backends` decide which policies run on the GPU (the engine refuses the others first); a
// selector the registry lists for cuda without a planner here is an internal error.
std::unique_ptr<RowPlanner> make_row_planner(const std::string& policy, const PlannerShape& shape) {
  const PolicySpec spec = parse_policy_spec(policy);
  SKIM_REQUIRE(!spec.find("cs") || (!spec.find("mac") && !spec.find("art")),
               "policy {}: cs with mac or art runs on the CPU only so far (drop --device cuda)", policy);
  if (const PolicyPart* retro = spec.find("retro")) {
    const PolicyPart* base = nullptr;
    for (const PolicyPart& part : spec.parts)
      if (find_policy_info(part.name)->stage == PolicyStage::Selector) base = &part;
    SKIM_REQUIRE(base && (base->name == "quest" || base->name == "gbsa" || base->name == "resa"),
                 "policy {}: retro needs quest, gbsa or resa", policy);
    int dense_layers = 0;
    if (base->name == "quest") quest_params(*base, dense_layers);
    else group_block_params(*base, dense_layers);
    const RetroRowRule rule{.active = 1, .window = retro->integer("w", kRetroWindow),
                            .per_head_units = base->name == "quest" ? 1 : 0, .dense_layers = dense_layers};
    SKIM_REQUIRE(rule.window >= 2 && rule.window <= 64, "policy {}: retro:w in [2, 64] on the GPU", policy);
    return std::make_unique<RetroRows>(make_selection_planner(policy, spec, shape), rule);
  }
  if (const PolicyPart* mac = spec.find("mac")) {
    const MacParams p = mac_params(*mac);
    SKIM_REQUIRE(p.window <= 4096, "policy {}: mac:window={} exceeds the GPU rings' 4096 entries", policy, p.window);
    return std::make_unique<MacRows>(make_selection_planner(policy, spec, shape), p);
  }
  return make_selection_planner(policy, spec, shape);
}

// The selection (and ART) of a policy string, without MAC.
std::unique_ptr<RowPlanner> make_selection_planner(const std::string& policy, const PolicySpec& spec,
                                                   const PlannerShape& shape) {
  if (const PolicyPart* art = spec.find("art")) {
    const PolicyPart* base = nullptr;
    for (const PolicyPart& part : spec.parts)
      if (find_policy_info(part.name)->stage == PolicyStage::Selector) base = &part;
    const ArtRowRule rule = gpu_art_rule(policy, *art, base, spec.find("mac") != nullptr);
    if (!base || base->name == "dense") {  // every page, in the group's bound order
      return std::make_unique<GroupPageRows>(shape, GroupBlockParams{.keep = 1.0, .n_min = 1, .n_local = 1}, 0,
                                             policy, rule);
    }
    int dense_layers = 0;
    if (base->name == "quest")
      return std::make_unique<QuestPageRows>(shape, quest_params(*base, dense_layers), dense_layers, policy, rule);
    if (base->name == "streaming") {
      const StreamingParams p = streaming_params(*base);
      return std::make_unique<WindowRows>(shape, p.sink, p.window, rule);
    }
    SKIM_REQUIRE(base->name == "gbsa" || base->name == "resa",
                 "policy {}: art on the GPU composes with dense (art:order=group), gbsa, resa, quest and streaming, "
                 "not {}", policy, base->name);
    const GroupBlockParams p = group_block_params(*base, dense_layers);
    return std::make_unique<GroupPageRows>(shape, p, dense_layers, policy, rule);
  }
  for (const PolicyPart& part : spec.parts) {
    const PolicyInfo* info = find_policy_info(part.name);
    if (info->stage != PolicyStage::Selector) continue;
    if (part.name == "dense") break;
    if (part.name == "streaming") {
      const StreamingParams p = streaming_params(part);
      return std::make_unique<WindowRows>(shape, p.sink, p.window);
    }
    if (part.name == "quest") {
      int dense_layers = 0;
      const QuestParams p = quest_params(part, dense_layers);
      return std::make_unique<QuestPageRows>(shape, p, dense_layers, policy);
    }
    if (part.name == "gbsa" || part.name == "resa") {
      int dense_layers = 0;
      const GroupBlockParams p = group_block_params(part, dense_layers);
      return std::make_unique<GroupPageRows>(shape, p, dense_layers, policy);
    }
    if (part.name == "cs") return std::make_unique<CsRows>(shape, cs_params(part));
    SKIM_REQUIRE(false, "policy {}: {} has no GPU selection kernel (the registry says it runs on cuda: a bug)",
                 policy, part.name);
  }
  return std::make_unique<WindowRows>(shape, 0, 0);
}

}  // namespace

DecodePlanner::DecodePlanner(const std::string& policy, const PlannerShape& shape)
    : s_(shape), dense_(std::make_unique<WindowRows>(shape, 0, 0)) {
  listed_.resize(1);
  check(cudaMemset(listed_.data(), 0, listed_.bytes()), "cudaMemset");
  const std::vector<ArtRowRule> none(kMaxPolicies, ArtRowRule{.active = 0});
  upload(rules_, none.data(), none.size());
  upload(above_rules_, none.data(), none.size());
  const std::vector<MacRowRule> no_mac(kMaxPolicies, MacRowRule{.active = 0});
  upload(mac_rules_, no_mac.data(), no_mac.size());
  const std::vector<RetroRowRule> no_retro(kMaxPolicies, RetroRowRule{.active = 0});
  upload(retro_rules_, no_retro.data(), no_retro.size());
  bool moved = false;
  acquire(policy, moved);
}

DecodePlanner::~DecodePlanner() = default;

namespace {

bool runs_pipeline(const RowPlanner& p) { return p.mac_rule() || p.retro_rule() || p.art_rule(); }

// MAC and RetroAttention each run their own pipeline around the step's kernel; one step runs
// one of them (the rows of other policies pass through it), so they are not held at once. cs's
// rows attend their token plan beside the page plan of the others (a step's cs rows first),
// which MAC's, Retro's and ART's kernels do not take; and the forward keeps one cs state, so
// one cs policy at a time.
void check_pipelines(const RowPlanner& p, const std::string& policy, const std::string& other_policy,
                     const RowPlanner& other) {
  SKIM_REQUIRE(!(p.mac_rule() && other.retro_rule()) && !(p.retro_rule() && other.mac_rule()),
               "policy {}: mac and retro do not run in one GPU batch yet ({} runs)", policy, other_policy);
  SKIM_REQUIRE(!(p.cs_params() && runs_pipeline(other)) && !(other.cs_params() && runs_pipeline(p)),
               "policy {}: cs does not decode beside mac, retro or art in one GPU batch yet ({} runs)", policy,
               other_policy);
  SKIM_REQUIRE(!(p.cs_params() && other.cs_params()) || policy == other_policy,
               "policy {}: one cs policy at a time on the GPU ({} runs)", policy, other_policy);
}

}  // namespace

int DecodePlanner::acquire(const std::string& policy, bool& moved) {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].planner && slots_[i].policy == policy) {
      for (const Slot& other : slots_)
        if (other.planner && other.users > 0) check_pipelines(*slots_[i].planner, policy, other.policy, *other.planner);
      slots_[i].users += 1;
      return int(i);
    }
  std::unique_ptr<RowPlanner> p = make_row_planner(policy, s_);
  for (const Slot& other : slots_)
    if (other.planner && other.users > 0) check_pipelines(*p, policy, other.policy, *other.planner);
  size_t at = slots_.size();  // a new index while there are fewer than kMaxPolicies
  if (at == size_t(kMaxPolicies)) {
    for (at = 0; at < slots_.size() && slots_[at].users > 0; ++at) {}
    SKIM_REQUIRE(at < slots_.size(), "policy {}: {} distinct policies already run on the GPU (at most {} at once)",
                 policy, slots_.size(), kMaxPolicies);
    moved = true;  // the index's graphs ran the policy it held before
  }
  reserve(*p, moved);
  const ArtRowRule rule = p->art_rule() ? *p->art_rule() : ArtRowRule{.active = 0};
  check(cudaMemcpy(rules_.data() + at, &rule, sizeof rule, cudaMemcpyHostToDevice), "cudaMemcpy (ART rule)");
  const ArtRowRule above = p->mac_rule() ? ArtRowRule{.active = 0} : rule;
  check(cudaMemcpy(above_rules_.data() + at, &above, sizeof above, cudaMemcpyHostToDevice), "cudaMemcpy (ART rule)");
  const MacRowRule mac = p->mac_rule() ? *p->mac_rule() : MacRowRule{.active = 0};
  check(cudaMemcpy(mac_rules_.data() + at, &mac, sizeof mac, cudaMemcpyHostToDevice), "cudaMemcpy (MAC rule)");
  const RetroRowRule retro = p->retro_rule() ? *p->retro_rule() : RetroRowRule{.active = 0};
  check(cudaMemcpy(retro_rules_.data() + at, &retro, sizeof retro, cudaMemcpyHostToDevice), "cudaMemcpy (retro rule)");
  if (at == slots_.size()) slots_.emplace_back();
  slots_[at] = Slot{policy, std::move(p), 1};
  return int(at);
}

void DecodePlanner::release(int index) {
  SKIM_REQUIRE(index >= 0 && size_t(index) < slots_.size() && slots_[size_t(index)].users > 0,
               "planner: policy index {} released more often than acquired", index);
  slots_[size_t(index)].users -= 1;
}

// The plan buffers, shared by every policy's rows, sized for the largest need: allocated when
// the first selecting policy arrives (a dense-only forward holds none).
void DecodePlanner::reserve(const RowPlanner& p, bool& moved) {
  const bool selects = !p.dense_in(s_.num_layers);  // the last layer selects if any does
  if (!selects) return;
  const size_t lists = size_t(s_.max_rows) * s_.num_kv_heads;
  reserve(step_, p, lists, s_.max_pages_per_seq, moved);
  if (s_.guesses)
    for (Buffers& g : guess_) reserve(g, p, lists, s_.max_pages_per_seq, moved);
}

void DecodePlanner::reserve(Buffers& b, const RowPlanner& p, size_t lists, int max_pages, bool& moved) {
  if (b.table.size() == 0) {
    b.table.resize(lists * size_t(max_pages));
    b.lens.resize(lists);
    moved = true;
  }
  if (p.writes_masks() && b.masks.size() == 0) {
    b.masks.resize(lists * size_t(max_pages));
    moved = true;
  }
  if (p.workspace_bytes() > b.workspace.bytes()) {
    b.workspace.resize(p.workspace_bytes());
    moved = true;
  }
}

DevicePlan DecodePlanner::plan(const PlanInput& in, cudaStream_t stream) {
  return plan_into(in, step_, listed_.data(), stream);
}

DevicePlan DecodePlanner::guess(const PlanInput& in, int set, cudaStream_t stream) {
  SKIM_REQUIRE(s_.guesses && (set == 0 || set == 1), "planner: guess() on a planner made without guesses");
  return plan_into(in, guess_[set], nullptr, stream);
}

bool DecodePlanner::selects_in(int layer, uint32_t policies, uint32_t dense_policies) const {
  for (uint32_t m = policies & ~dense_policies; m; m &= m - 1) {
    const RowPlanner* p = slots_[size_t(std::countr_zero(m))].planner.get();
    if (p && !p->dense_in(layer) && !p->cs_params()) return true;
  }
  return false;
}

DevicePlan DecodePlanner::plan_into(const PlanInput& in, Buffers& b, unsigned long long* listed, cudaStream_t stream) {
  uint32_t dense = 0, select = 0;
  bool masks = false;
  for (uint32_t m = in.policies; m; m &= m - 1) {
    const int i = std::countr_zero(m);
    SKIM_REQUIRE(size_t(i) < slots_.size() && slots_[size_t(i)].planner, "planner: unknown policy index {}", i);
    const RowPlanner& p = *slots_[size_t(i)].planner;
    const bool all_keys = p.dense_in(in.layer) || (in.dense_policies >> i & 1u);
    (all_keys ? dense : select) |= 1u << i;
    if (!all_keys) masks |= p.writes_masks();
  }
  // CSAttention: its rows (the step's first, in an indexed layer) attend the token plan the
  // forward's CsState makes; the others' pages are planned as if it were absent.
  uint32_t cs = 0;
  for (uint32_t m = select; m; m &= m - 1)
    if (slots_[size_t(std::countr_zero(m))].planner->cs_params()) cs |= m & ~(m - 1);
  select &= ~cs;
  DevicePlan p = plan_pages(in, dense, select, masks, b, listed, stream);
  p.cs = cs != 0;
  return p;
}

DevicePlan DecodePlanner::plan_pages(const PlanInput& in, uint32_t dense, uint32_t select, bool masks, Buffers& b,
                                     unsigned long long* listed, cudaStream_t stream) {
  uint32_t mac = 0;  // present policies running MAC
  bool retro = false, mac_art = false;
  int mac_above = 0;  // the most pages of a MAC row's `above` list: [prefix end, row end)
  for (uint32_t m = in.policies; m; m &= m - 1) {
    const RowPlanner& p = *slots_[size_t(std::countr_zero(m))].planner;
    if (const MacRowRule* r = p.mac_rule()) {
      mac |= m & ~(m - 1);
      mac_art |= p.art_rule() != nullptr;
      mac_above = std::max(mac_above, (r->band + s_.page_size - 1) / s_.page_size + 2);
    }
    retro |= p.retro_rule() != nullptr;
  }
  if (mac != in.policies) mac_above = 0;  // another policy's rows pass through whole into `above`
  if (select == 0) {
    DevicePlan p{false, in.page_table, in.seq_lens, in.max_seq_len};
    if (mac) p.mac_rules = mac_rules_.data(), p.mac_policies = mac, p.mac_above_pages = mac_above;
    if (retro) p.retro_rules = retro_rules_.data();
    return p;
  }
  const RowPlanner::Out out{b.table.data(), b.lens.data(), masks ? b.masks.data() : nullptr, b.workspace.data(),
                            b.workspace.bytes(), listed};
  // One policy and no RetroAttention (whose past rows are not planned): every row is the
  // policy's, so the kernels need not read each row's policy index (a dependent load at the
  // start of every selection kernel, measurable at batch 1). The graph key holds the policies.
  PlanInput sel = in;
  if (std::has_single_bit(in.policies) && !retro) sel.row_policy = nullptr;
  int bound = 0;
  if (dense) {
    dense_->select(sel, dense, out, stream);
    bound = in.max_seq_len;
  }
  int art_round = 0, art_warps = 0;
  for (uint32_t m = select; m; m &= m - 1) {
    RowPlanner& p = *slots_[size_t(std::countr_zero(m))].planner;
    p.select(sel, m & ~(m - 1), out, stream);
    bound = std::max(bound, p.list_tokens(in.max_seq_len));
    if (const ArtRowRule* r = p.art_rule()) {
      art_round = art_round ? std::min(art_round, r->round_pages) : r->round_pages;
      if (r->max_warps > 0) art_warps = art_warps ? std::min(art_warps, r->max_warps) : r->max_warps;
    }
  }
  DevicePlan p{true, b.table.data(), b.lens.data(), std::min(in.max_seq_len, bound), out.masks,
               art_round ? rules_.data() : nullptr, art_round, art_warps, mac ? mac_rules_.data() : nullptr, mac,
               retro ? retro_rules_.data() : nullptr};
  if (art_round && mac) p.art_rules_above = above_rules_.data(), p.mac_art = mac_art;
  p.mac_above_pages = mac_above;
  return p;
}

int DecodePlanner::retro_entries() const {
  int e = 0;
  for (const Slot& s : slots_)
    if (s.planner && s.planner->retro_rule()) e = std::max(e, s.planner->retro_rule()->window);
  return e;
}

const RetroRowRule* DecodePlanner::retro_rule(int index) const {
  return size_t(index) < slots_.size() && slots_[size_t(index)].planner
             ? slots_[size_t(index)].planner->retro_rule()
             : nullptr;
}

int DecodePlanner::mac_capacity() const {
  int k = 0;
  for (const Slot& s : slots_)
    if (s.planner && s.planner->mac_rule()) k = std::max(k, s.planner->mac_rule()->window);
  return k;
}

const MacRowRule* DecodePlanner::mac_rule(int index) const {
  return size_t(index) < slots_.size() && slots_[size_t(index)].planner ? slots_[size_t(index)].planner->mac_rule()
                                                                         : nullptr;
}

const std::string& DecodePlanner::policy(int index) const {
  SKIM_REQUIRE(index >= 0 && size_t(index) < slots_.size(), "planner: no policy at index {}", index);
  return slots_[size_t(index)].policy;
}

const CsParams* DecodePlanner::cs_params(int index) const {
  return size_t(index) < slots_.size() && slots_[size_t(index)].planner ? slots_[size_t(index)].planner->cs_params()
                                                                         : nullptr;
}

const ArtRowRule* DecodePlanner::art_rule(int index) const {
  return size_t(index) < slots_.size() && slots_[size_t(index)].planner ? slots_[size_t(index)].planner->art_rule()
                                                                         : nullptr;
}

bool DecodePlanner::has_art() const {
  for (const Slot& s : slots_)
    if (s.planner && s.planner->art_rule()) return true;
  return false;
}

double DecodePlanner::bytes_read(int index, int layer, int length) const {
  return slots_.at(size_t(index)).planner->bytes_read(layer, length);
}

uint32_t DecodePlanner::dense_fallback(std::span<const int32_t> row_policy, std::span<const int32_t> lengths) const {
  std::array<int64_t, kMaxPolicies> skipped{};
  uint32_t present = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    const int i = row_policy.empty() ? 0 : row_policy[r];
    if (i < 0 || size_t(i) >= slots_.size() || !slots_[size_t(i)].planner) continue;  // Retro's past rows
    present |= 1u << i;
    skipped[size_t(i)] += slots_[size_t(i)].planner->skipped_tokens(lengths[r]);
  }
  uint32_t dense = 0;
  for (uint32_t m = present; m; m &= m - 1) {
    const int i = std::countr_zero(m);
    if (skipped[size_t(i)] < slots_[size_t(i)].planner->dense_below()) dense |= 1u << i;
  }
  return dense;
}

int DecodePlanner::list_tokens(int index, int length) const {
  return slots_.at(size_t(index)).planner->list_tokens(length);
}

double DecodePlanner::dense_bytes(int length) const { return length * kv_bytes_per_token(s_); }

double DecodePlanner::host_bytes(int index, int layer, int length) const {
  return slots_.at(size_t(index)).planner->host_bytes(layer, length);
}

double DecodePlanner::device_bytes(cudaStream_t stream) const {
  unsigned long long tokens = 0;
  check(cudaStreamSynchronize(stream), "forward pass");
  check(cudaMemcpy(&tokens, listed_.data(), sizeof(tokens), cudaMemcpyDeviceToHost), "cudaMemcpy (listed tokens)");
  return double(tokens) * 2.0 * s_.head_dim * sizeof(uint16_t);  // a list is one KV head's K and V
}

}  // namespace skim::cuda
