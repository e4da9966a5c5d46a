// The selection stage of a decode step on the GPU: per layer, the page plan the decode kernel
// reads (attention/page_plan.h's layout, on the device), written inside the step's graph by
// the selection kernels of the batch's policies. The CUDA side of the CPU selectors' plan()
// (attention/selector.h): `dense` passes the step's page tables through; `streaming` runs
// window_page_plan (sinks and recent window in whole pages, as cpu::window_page_plan); `gbsa`
// (and `resa`, gbsa + rectify) runs group_page_select, the same choice as
// cpu::group_page_select; `quest` runs quest_page_select.
//
// A batch may mix policies: each row names its policy by an index (add()), and a layer's plan
// holds every row's list, each written by its own policy's kernel (filtered by PlanRows) into
// one set of buffers; dense rows among selected ones are copied by window_page_plan. Which
// policies a step has is part of the step's graph key (the kernels each launches); which row
// has which is data. Nothing allocates in plan(); add() allocates, outside steps.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attention/art_decode_args.h"
#include "attention/policy_spec.h"
#include "attention/mac_decode_args.h"
#include "attention/retro_decode_args.h"
#include "backend/cuda/device_memory.h"
#include "model/config.h"

namespace skim {
struct CsParams;  // attention/csattn.h
}

namespace skim::cuda {

// One layer's decode rows, device pointers.
struct PlanInput {
  int layer = 0, n = 0;
  // row_policy below may give a row an index no planner holds (RetroAttention's past rows:
  // their base lists are their newest row's), which leaves its lists unwritten.
  int max_seq_len = 0;                 // host bound of the rows' lengths
  const uint16_t* q = nullptr;         // [n][num_heads][head_dim], post-RoPE
  const uint16_t* kmin = nullptr;      // the layer's page digests
  const uint16_t* kmax = nullptr;
  const int32_t* page_table = nullptr;  // [n][max_pages_per_seq]
  const int32_t* seq_lens = nullptr;    // [n]
  const int32_t* row_policy = nullptr;  // [n] each row's policy index
  uint32_t policies = 1;                // bit i: some row has policy i
  uint32_t dense_policies = 0;          // bit i: policy i's rows attend every key this step
};

// A plan on the device, in PagedDecodeArgs' terms.
struct DevicePlan {
  bool per_kv_head = false;  // tables_per_kv_head
  const int32_t* table = nullptr;
  const int32_t* lens = nullptr;
  int max_seq_len = 0;  // host bound of the lists' tokens
  const uint32_t* head_masks = nullptr;  // per-head page masks (quest); null: every head
  // When a row of the step runs ART here: every row's rule by its policy index (art_decode_args.h
  // ArtRowRule; the others inactive), and the smallest round of the present ART policies.
  const ArtRowRule* art_rules = nullptr;
  int art_round_pages = 0;
  int art_max_warps = 0;  // the smallest art:warps of the present ART policies (0: none set)
  // When a row of the step runs MAC: every policy index's rule (inactive for the others) and the
  // present policies that have one (the rows mac_page_plan cuts; the others pass through).
  const MacRowRule* mac_rules = nullptr;
  uint32_t mac_policies = 0;
  // When a row of the step runs RetroAttention: every policy index's rule (inactive for the others).
  const RetroRowRule* retro_rules = nullptr;
  // Some rows of the step run CSAttention, indexed at this layer: the step's first rows (the
  // forward puts them there), whose token plan the forward's CsState makes; the lists above
  // are the other rows' (unused when every row runs cs).
  bool cs = false;
  // With art_rules and mac_rules: the rules for MAC's `above` lists, mac+art's inactive (ART
  // stops in `below` only; `above` is read whole), the other policies' as art_rules.
  const ArtRowRule* art_rules_above = nullptr;
  bool mac_art = false;  // a present policy runs mac+art: `below` in ART's order, stopped by ART
  // Every row of the step runs MAC: the most pages a row's `above` list holds (its band's pages
  // and two more: PagedDecodeArgs::short_pages); else 0 (pass-through rows list whole contexts there).
  int mac_above_pages = 0;
};

struct PlannerShape {
  int num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int page_size = 16;
  int max_rows = 0;           // decode rows of one step
  int max_pages_per_seq = 0;  // page-table row length
  bool guesses = false;       // room for DecodePlanner::guess (two more sets of plan buffers)
};

// One policy's part of a plan: the rows of its index, written by its kernel.
class RowPlanner {
 public:
  virtual ~RowPlanner() = default;
  // Whether this layer attends every key (dense, or a dense layer of a selecting policy).
  virtual bool dense_in(int layer) const = 0;
  virtual bool writes_masks() const { return false; }  // per-head masks (quest)
  virtual size_t workspace_bytes() const { return 0; }
  // Writes the lists of the rows in `rows` (PlanRows' mask); masks when `out.masks` is set.
  struct Out {
    int32_t* table = nullptr;
    int32_t* lens = nullptr;
    uint32_t* masks = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    unsigned long long* listed_tokens = nullptr;  // device counter of the tokens a union lists
  };
  virtual void select(const PlanInput& in, uint32_t rows, const Out& out, cudaStream_t stream) = 0;
  // Tokens of one list at most, rows of at most max_seq_len tokens.
  virtual int list_tokens(int max_seq_len) const { return max_seq_len; }
  // K/V and digest bytes a decode row of `length` tokens reads in `layer` (bf16 cache). For a
  // selection per head (quest) the union is data: this counts the per-head budget, its floor.
  virtual double bytes_read(int layer, int length) const = 0;
  // The part of those the host counts: all of them, but for a union counted on the device
  // (quest's K/V: Out::listed_tokens), which is left out here.
  virtual double host_bytes(int layer, int length) const { return bytes_read(layer, length); }
  // The digest bytes of those (what a selection reads besides K/V).
  virtual double metadata_bytes(int /*layer*/, int /*length*/) const { return 0; }
  // ART over this policy's lists (they are then in visiting order, the partial page first).
  virtual const ArtRowRule* art_rule() const { return nullptr; }
  // MAC over this policy's lists (its base's plan, cut at each row's prefix end).
  virtual const MacRowRule* mac_rule() const { return nullptr; }
  // RetroAttention over this policy's lists (its past rows get the pages they have not seen).
  virtual const RetroRowRule* retro_rule() const { return nullptr; }
  // The dense fallback (DecodePlanner::dense_fallback): a step's rows of this policy attend every
  // key when the tokens its selection leaves unread, summed over them, are fewer than
  // dense_below() (0: never), and how many a row of `length` tokens leaves unread.
  virtual int dense_below() const { return 0; }
  virtual int skipped_tokens(int /*length*/) const { return 0; }
  // CSAttention: its rows attend a token plan the forward's CsState makes (no page plan here).
  virtual const CsParams* cs_params() const { return nullptr; }
};

// The rule ART runs on the GPU for a policy string's `art` part over its selector (`base`,
// null: dense): the ART decode kernel's (stop=group, test=probe, blocks of 4 pages, rounds of
// at most 32 blocks; over dense in the group's order). with_mac: the policy composes MAC too,
// whose ART stops per head by default on the CPU, so the GPU asks for art:stop=group in the
// string rather than reading another default. Refuses (skim::Error) what the kernel cannot run.
// Host code only: no device needed.
ArtRowRule gpu_art_rule(const std::string& policy, const PolicyPart& art, const PolicyPart* base,
                        bool with_mac = false);

// The GPU forward's planner: the policies its sequences run, by index, and the plan buffers
// they share.
class DecodePlanner {
 public:
  static constexpr int kMaxPolicies = 8;  // distinct policies live at once

  // Index 0 is `policy`, held for the planner's life (the engine's default).
  DecodePlanner(const std::string& policy, const PlannerShape& shape);
  ~DecodePlanner();

  // The index of a policy string, registering it when new; each acquire is released once.
  // Refuses (skim::Error) a policy without GPU kernels, parameters out of the kernels' range,
  // or a ninth distinct policy. `moved` is set when the shared buffers were reallocated (the
  // caller's captured graphs then point at freed memory).
  int acquire(const std::string& policy, bool& moved);
  void release(int index);

  DevicePlan plan(const PlanInput& in, cudaStream_t stream);
  // plan() over a guessed query into buffers of its own (PlannerShape::guesses; two sets, by
  // `set`: two guesses may be in flight), counted nowhere: KV beyond GPU memory copies the next
  // layer's pages ahead by it while this layer's plan is still read (GpuForward's prefetch).
  DevicePlan guess(const PlanInput& in, int set, cudaStream_t stream);
  // Whether plan() of a step with these policies (PlanInput's bits) selects pages in `layer`:
  // some present policy other than cs attends a part of the keys there.
  bool selects_in(int layer, uint32_t policies, uint32_t dense_policies) const;
  // Bytes of a decode row under policy `index`: the plan's floor (bytes_read), and the part
  // the host counts (host_bytes); device_bytes adds the K/V of the lists counted on the
  // device so far (waits for `stream`: outside steps only).
  double bytes_read(int index, int layer, int length) const;
  double host_bytes(int index, int layer, int length) const;
  // The policies of a decode step whose rows attend every key instead of selecting (bit i for
  // index i; PlanInput::dense_policies): those whose selection would leave fewer tokens unread
  // over the step's rows (each row's index and length) than its dense_below(), where the
  // selection's kernels cost more than the reads they save. Dense reads are never worse.
  uint32_t dense_fallback(std::span<const int32_t> row_policy, std::span<const int32_t> lengths) const;
  // Tokens of one list of a row of `length` tokens under policy `index` (at most).
  int list_tokens(int index, int length) const;
  // Bytes of a decode row of policy `index` attending every key (a dense fallback's).
  double dense_bytes(int length) const;
  double device_bytes(cudaStream_t stream) const;
  bool has_art() const;  // some registered policy runs ART (the forward then needs its workspace)
  const ArtRowRule* art_rule(int index) const;  // index's ART rule, or null
  // The largest ring a registered MAC policy keeps (0: none runs MAC), and whether index
  // `index` runs MAC.
  int mac_capacity() const;
  const MacRowRule* mac_rule(int index) const;
  const MacRowRule* mac_rules_device() const { return mac_rules_.data(); }  // [kMaxPolicies]
  // The largest output cache a registered retro policy keeps (w entries; 0: none), and index's rule.
  int retro_entries() const;
  const RetroRowRule* retro_rule(int index) const;
  const CsParams* cs_params(int index) const;  // index's CSAttention parameters, or null
  const std::string& policy(int index) const;   // index's policy string

 private:
  void reserve(const RowPlanner& p, bool& moved);
  // plan() for the rows of the policies that attend every key (`dense`) and those that select
  // pages (`select`), writing per-head masks if `masks`.
  struct Buffers {
    DeviceBuffer<int32_t> table, lens;
    DeviceBuffer<uint32_t> masks;
    DeviceBuffer<uint8_t> workspace;
  };
  DevicePlan plan_pages(const PlanInput& in, uint32_t dense, uint32_t select, bool masks, Buffers& b,
                        unsigned long long* listed, cudaStream_t stream);
  DevicePlan plan_into(const PlanInput& in, Buffers& b, unsigned long long* listed, cudaStream_t stream);
  static void reserve(Buffers& b, const RowPlanner& p, size_t lists, int max_pages, bool& moved);

  PlannerShape s_;
  struct Slot {
    std::string policy;
    std::unique_ptr<RowPlanner> planner;
    int users = 0;
  };
  std::vector<Slot> slots_;
  std::unique_ptr<RowPlanner> dense_;  // the dense rows of a plan that selects others
  Buffers step_;   // the plans the step reads
  Buffers guess_[2];  // guess()'s (PlannerShape::guesses)
  DeviceBuffer<unsigned long long> listed_;  // tokens the unions listed, every step and layer
  DeviceBuffer<ArtRowRule> rules_;           // [kMaxPolicies] each index's ART rule (inactive: none)
  DeviceBuffer<ArtRowRule> above_rules_;     // the same, MAC policies' inactive (DevicePlan::art_rules_above)
  DeviceBuffer<MacRowRule> mac_rules_;       // [kMaxPolicies] each index's MAC rule (inactive: none)
  DeviceBuffer<RetroRowRule> retro_rules_;   // [kMaxPolicies] each index's retro rule (inactive: none)
};

}  // namespace skim::cuda
