#include "backend/cuda/decode_planner.h"

#include <algorithm>

#include "attention/policy_registry.h"
#include "attention/policy_spec.h"
#include "attention/selectors.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/group_page_select.cuh"
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

// ReSA's group block-sparse selection: group_page_select into kept lists per (row, KV head);
// the first dense_layers layers plan densely.
class GroupPagePlanner final : public DecodePlanner {
 public:
  GroupPagePlanner(const PlannerShape& s, const GroupBlockParams& p, int dense_layers, const std::string& policy)
      : s_(s), p_(p), dense_(s), dense_layers_(dense_layers) {
    const size_t ws = group_page_select_workspace_size(args(PlanInput{.n = s.max_rows}));
    SKIM_REQUIRE(ws > 0, "policy {}: keep {} / n_min {} / n_local {} out of the GPU selection's range", policy,
                 p.keep, p.n_min, p.n_local);
    table_.resize(size_t(s.max_rows) * s.num_kv_heads * s.max_pages_per_seq);
    lens_.resize(size_t(s.max_rows) * s.num_kv_heads);
    workspace_.resize(ws);
  }

  DevicePlan plan(const PlanInput& in, cudaStream_t stream) override {
    if (in.layer < dense_layers_) return dense_.plan(in, stream);
    check(group_page_select(args(in), stream), "group_page_select");
    const int ps = s_.page_size;
    const int kept = group_pages_kept((in.max_seq_len + ps - 1) / ps, p_.keep, p_.n_min);
    return {true, table_.data(), lens_.data(), std::min(in.max_seq_len, kept * ps)};
  }

  double bytes_read(int layer, int length) const override {
    if (layer < dense_layers_) return dense_.bytes_read(layer, length);
    const int ps = s_.page_size, pages = (length + ps - 1) / ps;
    const int kept = std::min(length, group_pages_kept(pages, p_.keep, p_.n_min) * ps);
    const double digests = double(pages) * s_.num_kv_heads * s_.head_dim * 2 * sizeof(uint16_t);
    return kept * kv_bytes_per_token(s_) + digests;
  }

 private:
  GroupPageSelectArgs args(const PlanInput& in) {
    return {.batch = in.n, .num_heads = s_.num_heads, .num_kv_heads = s_.num_kv_heads, .head_dim = s_.head_dim,
            .page_size = s_.page_size, .max_pages_per_seq = s_.max_pages_per_seq, .keep = p_.keep,
            .n_min = p_.n_min, .n_local = p_.n_local, .q = in.q, .kmin = in.kmin, .kmax = in.kmax,
            .page_table = in.page_table, .seq_lens = in.seq_lens, .out_table = table_.data(),
            .out_lens = lens_.data(), .workspace = workspace_.data(), .workspace_bytes = workspace_.bytes()};
  }

  PlannerShape s_;
  GroupBlockParams p_;
  DensePlanner dense_;
  int dense_layers_ = 0;
  DeviceBuffer<int32_t> table_, lens_;
  DeviceBuffer<uint8_t> workspace_;
};

}  // namespace

std::unique_ptr<DecodePlanner> make_decode_planner(const std::string& policy, const PlannerShape& shape) {
  const PolicySpec spec = parse_policy_spec(policy);
  for (const PolicyPart& part : spec.parts) {
    const PolicyInfo* info = find_policy_info(part.name);
    if (info->stage != PolicyStage::Selector) continue;
    if (part.name == "dense") break;
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
