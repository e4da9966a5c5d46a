// The selection stage of a decode step on the GPU: per layer, the page plan the decode kernel
// reads (attention/page_plan.h's layout, on the device), written inside the step's graph by
// the policy's selection kernel. The CUDA side of the CPU selectors' plan() (attention/
// selector.h): `dense` passes the step's page tables through; `gbsa` (and `resa`, gbsa +
// rectify) runs group_page_select, the same choice as cpu::group_page_select. The attention
// op takes whatever plan the planner gives: adding a GPU selector is a planner here and its
// kernels. Nothing allocates after construction.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "model/config.h"

namespace skim::cuda {

// One layer's decode rows, device pointers.
struct PlanInput {
  int layer = 0, n = 0;
  int max_seq_len = 0;                 // host bound of the rows' lengths
  const uint16_t* q = nullptr;         // [n][num_heads][head_dim], post-RoPE
  const uint16_t* kmin = nullptr;      // the layer's page digests
  const uint16_t* kmax = nullptr;
  const int32_t* page_table = nullptr;  // [n][max_pages_per_seq]
  const int32_t* seq_lens = nullptr;    // [n]
};

// A plan on the device, in PagedDecodeArgs' terms.
struct DevicePlan {
  bool per_kv_head = false;  // tables_per_kv_head
  const int32_t* table = nullptr;
  const int32_t* lens = nullptr;
  int max_seq_len = 0;  // host bound of the lists' tokens
  const uint32_t* head_masks = nullptr;  // per-head page masks (quest); null: every head
};

struct PlannerShape {
  int num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int page_size = 16;
  int max_rows = 0;           // decode rows of one step
  int max_pages_per_seq = 0;  // page-table row length
};

class DecodePlanner {
 public:
  virtual ~DecodePlanner() = default;
  virtual DevicePlan plan(const PlanInput& in, cudaStream_t stream) = 0;
  // K/V and digest bytes a decode row of `length` tokens reads in `layer` (bf16 cache). For a
  // selection per head (quest) the union is data: this counts the per-head budget, its floor.
  virtual double bytes_read(int layer, int length) const = 0;
};

// The planner of a policy string's selector (dense when it has none). The registry's
// `backends` decide which policies run on the GPU (the engine refuses the others first); a
// selector the registry lists for cuda without a planner here is an internal error.
std::unique_ptr<DecodePlanner> make_decode_planner(const std::string& policy, const PlannerShape& shape);

}  // namespace skim::cuda
