#include "backend/cuda/decode_planner.h"

#include <algorithm>

#include <fmt/format.h>

#include "attention/policy_registry.h"
#include "attention/policy_spec.h"
#include "attention/selectors.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/group_page_select.cuh"
#include "backend/cuda/quest_page_select.cuh"
#include "core/error.h"

namespace skim::cuda {

namespace {

double kv_bytes_per_token(const PlannerShape& s) { return 2.0 * s.num_kv_heads * s.head_dim * sizeof(uint16_t); }

// Every key: the step's own page tables.
class DensePlanner final : public DecodePlanner {
 public:
  explicit DensePlanner(const PlannerShape& s) : s_(s) {}
  DevicePlan plan(const PlanInput& in, cudaStream_t) override {
    return {false, in.page_table, in.seq_lens, in.max_seq_len};
  }
  double bytes_read(int, int length) const override { return length * kv_bytes_per_token(s_); }

 private:
  PlannerShape s_;
};

// A selection kernel's planner: its lists per (row, KV head) (and per-head masks) live in its
// own buffers; the first dense_layers layers plan densely. The kernel itself, and how many
// pages a head keeps, are the subclass's.
class SelectionPlanner : public DecodePlanner {
 public:
  DevicePlan plan(const PlanInput& in, cudaStream_t stream) final {
    if (in.layer < dense_layers_) return dense_.plan(in, stream);
    select(in, stream);
    const int ps = s_.page_size, bound = list_pages((in.max_seq_len + ps - 1) / ps, in.max_seq_len) * ps;
    return {true, table_.data(), lens_.data(), std::min(in.max_seq_len, bound),
            masks_.size() ? masks_.data() : nullptr};
  }

  // Digests plus the pages a head keeps (for a per-head choice the union's floor).
  double bytes_read(int layer, int length) const final {
    if (layer < dense_layers_) return dense_.bytes_read(layer, length);
    const int ps = s_.page_size, pages = (length + ps - 1) / ps;
    const double digests = double(pages) * s_.num_kv_heads * s_.head_dim * 2 * sizeof(uint16_t);
    return std::min(length, head_pages(pages, length) * ps) * kv_bytes_per_token(s_) + digests;
  }

 protected:
  SelectionPlanner(const PlannerShape& s, int dense_layers) : s_(s), dense_(s), dense_layers_(dense_layers) {}
  // Sizes the buffers once the kernel's workspace is known (0: parameters out of its range).
  void allocate(size_t workspace_bytes, bool masks, const std::string& why_not) {
    SKIM_REQUIRE(workspace_bytes > 0, "{}", why_not);
    table_.resize(size_t(s_.max_rows) * s_.num_kv_heads * s_.max_pages_per_seq);
    if (masks) masks_.resize(table_.size());
    lens_.resize(size_t(s_.max_rows) * s_.num_kv_heads);
    workspace_.resize(workspace_bytes);
  }
  virtual void select(const PlanInput& in, cudaStream_t stream) = 0;
  // Pages one head keeps of `pages` (`length` tokens), and at most one list's.
  virtual int head_pages(int pages, int length) const = 0;
  virtual int list_pages(int pages, int length) const { return head_pages(pages, length); }

  PlannerShape s_;
  DensePlanner dense_;
  int dense_layers_ = 0;
  DeviceBuffer<int32_t> table_, lens_;
  DeviceBuffer<uint32_t> masks_;
  DeviceBuffer<uint8_t> workspace_;
};

// ReSA's group block-sparse selection: group_page_select, one list per (row, KV head).
class GroupPagePlanner final : public SelectionPlanner {
 public:
  GroupPagePlanner(const PlannerShape& s, const GroupBlockParams& p, int dense_layers, const std::string& policy)
      : SelectionPlanner(s, dense_layers), p_(p) {
    allocate(group_page_select_workspace_size(args(PlanInput{.n = s.max_rows})), false,
             fmt::format("policy {}: keep {} / n_min {} / n_local {} out of the GPU selection's range", policy,
                         p.keep, p.n_min, p.n_local));
  }

 private:
  void select(const PlanInput& in, cudaStream_t stream) override {
    check(group_page_select(args(in), stream), "group_page_select");
  }
  int head_pages(int pages, int) const override { return group_pages_kept(pages, p_.keep, p_.n_min); }
  GroupPageSelectArgs args(const PlanInput& in) {
    return {.batch = in.n, .num_heads = s_.num_heads, .num_kv_heads = s_.num_kv_heads, .head_dim = s_.head_dim,
            .page_size = s_.page_size, .max_pages_per_seq = s_.max_pages_per_seq, .keep = p_.keep,
            .n_min = p_.n_min, .n_local = p_.n_local, .q = in.q, .kmin = in.kmin, .kmax = in.kmax,
            .page_table = in.page_table, .seq_lens = in.seq_lens, .out_table = table_.data(),
            .out_lens = lens_.data(), .workspace = workspace_.data(), .workspace_bytes = workspace_.bytes()};
  }

  GroupBlockParams p_;
};

// Quest: quest_page_select, per (row, KV head) the union of its heads' pages with a mask per
// query head.
class QuestPagePlanner final : public SelectionPlanner {
 public:
  QuestPagePlanner(const PlannerShape& s, const QuestParams& p, int dense_layers, const std::string& policy)
      : SelectionPlanner(s, dense_layers), p_(p) {
    allocate(quest_page_select_workspace_size(args(PlanInput{.n = s.max_rows})), true,
             fmt::format("policy {}: budget {} / min {} out of the GPU selection's range (or more than 32 "
                         "query heads per KV head)", policy, p.budget, p.min_tokens));
  }

 private:
  void select(const PlanInput& in, cudaStream_t stream) override {
    check(quest_page_select(args(in), stream), "quest_page_select");
  }
  int head_pages(int pages, int length) const override {
    return std::min(pages, quest_pages_kept(p_.budget, p_.min_tokens, length, s_.page_size));
  }
  int list_pages(int pages, int length) const override {
    return std::min(pages, s_.num_heads / s_.num_kv_heads * head_pages(pages, length));
  }
  QuestPageSelectArgs args(const PlanInput& in) {
    return {.batch = in.n, .num_heads = s_.num_heads, .num_kv_heads = s_.num_kv_heads, .head_dim = s_.head_dim,
            .page_size = s_.page_size, .max_pages_per_seq = s_.max_pages_per_seq, .budget = p_.budget,
            .min_tokens = p_.min_tokens, .q = in.q, .kmin = in.kmin, .kmax = in.kmax, .page_table = in.page_table,
            .seq_lens = in.seq_lens, .out_table = table_.data(), .out_masks = masks_.data(),
            .out_lens = lens_.data(), .workspace = workspace_.data(), .workspace_bytes = workspace_.bytes()};
  }

  QuestParams p_;
};

}  // namespace

std::unique_ptr<DecodePlanner> make_decode_planner(const std::string& policy, const PlannerShape& shape) {
  const PolicySpec spec = parse_policy_spec(policy);
  for (const PolicyPart& part : spec.parts) {
    const PolicyInfo* info = find_policy_info(part.name);
    if (info->stage != PolicyStage::Selector) continue;
    if (part.name == "dense") break;
    if (part.name == "quest") {
      int dense_layers = 0;
      const QuestParams p = quest_params(part, dense_layers);
      return std::make_unique<QuestPagePlanner>(shape, p, dense_layers, policy);
    }
    if (part.name == "gbsa" || part.name == "resa") {
      int dense_layers = 0;
      const GroupBlockParams p = group_block_params(part, dense_layers);
      return std::make_unique<GroupPagePlanner>(shape, p, dense_layers, policy);
    }
    SKIM_REQUIRE(false, "policy {}: {} has no GPU selection kernel (the registry says it runs on cuda: a bug)",
                 policy, part.name);
  }
  return std::make_unique<DensePlanner>(shape);
}

}  // namespace skim::cuda
