// The small kernels around CSAttention's table kernels in the GPU forward (cuda::CsState,
// backend/cuda/cs_state.h): the prompt's query sample, each decode step's per-(row, KV group)
// arguments as data (a graph replays them with the step's rows), and the token plan. This
// header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "attention/cs_kernel_args.h"

namespace skim::cuda {

// Where the tables of (slot, layer, KV head) live: unit u = (slot * layers + layer) * kv + h
// (layers: the indexed ones, dense layers excluded), each array a fixed stride per unit.
struct CsUnitLayout {
  int layers = 0, kv_heads = 0, head_dim = 0, subspaces = 0, centroids = 0;
  int list_stride = 0;  // S: every slot's lists are S entries apart (each fills its own capacity)
  int sample_capacity = 0;  // sampled prompt vectors a unit holds (twice the build's points)
  float* samples = nullptr;      // [units][sample_capacity][head_dim]
  float* centroids_data = nullptr;  // [units][M * C * ds]
  int32_t* list_index = nullptr;    // [units][M * C][S]
  uint16_t* list_score = nullptr;   // [units][M * C][S]
  int32_t* list_size = nullptr;     // [units][M * C]
  float* tail = nullptr;            // [units][M * C]

  SKIM_HOST_DEVICE int lists() const { return subspaces * centroids; }
  SKIM_HOST_DEVICE size_t unit(int slot, int layer, int h) const {
    return (size_t(slot) * layers + layer) * kv_heads + h;
  }
  SKIM_HOST_DEVICE CsTablesView view(size_t u) const {
    return {centroids_data + u * size_t(lists()) * (head_dim / subspaces), list_index + u * size_t(lists()) * list_stride,
            list_score + u * size_t(lists()) * list_stride, list_size + u * size_t(lists()), tail + u * size_t(lists())};
  }
};

// Prefill rows [0, n) of one sequence (slot), layer `layer` (an indexed one): the (query, head)
// vectors the build will cluster, a strided sample of the prompt's (vector v = (position -
// first) x group + g, every `stride`-th at index v / stride, below sample_capacity), copied from
// the bf16 queries q [n][num_heads][head_dim] as fp32 into the slot's samples.
cudaError_t cs_sample_queries(const CsUnitLayout& t, int slot, int layer, const uint16_t* q, const int32_t* positions,
                              int n, int num_heads, int first, int stride, cudaStream_t stream);
// The slot's samples of every indexed layer and KV head halved in place, sample i <- sample 2i
// for i < kept / 2 (the stride doubles: the sample stays every stride-th vector).
cudaError_t cs_halve_samples(const CsUnitLayout& t, int slot, int kept, cudaStream_t stream);

// A decode step's arguments, per (row r, KV head h), search s = r x kv + h, for layer `layer`:
// the group-mean query (fp32, summed as the CPU's pooling: q_h / group in head order), the row's
// new key (fp32, from the paged pool at its position), its insert (the row's slot's tables, its
// capacity from capacities[slot]) and its search's tables, context (position + 1), window begin
// (context - window, at least 0) and picks (keep x context, less the window). Every row must
// run cs (row_slot >= 0).
struct CsStepArgs {
  CsUnitLayout tables;
  int layer = 0, n = 0, num_heads = 0;
  const uint16_t* q = nullptr;          // [n][num_heads][head_dim] bf16
  const uint16_t* k_pool = nullptr;     // the layer's [pages][kv][page_size][head_dim] bf16
  const int32_t* positions = nullptr;   // [n]
  const int32_t* page_table = nullptr;  // [n][max_pages_per_seq]
  int max_pages_per_seq = 0, page_size = 16;
  const int32_t* row_slot = nullptr;    // [n]
  const int32_t* capacities = nullptr;  // [slots] each slot's list capacity
  int window = 0;
  double keep = 0.0;  // as the CPU computes K: ceil(keep x context) in double
  bool score_dot = true;
  // Out, [n x kv]: queries and keys [.][head_dim], the kernels' argument arrays.
  float* queries = nullptr;
  float* keys = nullptr;
  CsInsertArgs* inserts = nullptr;
  CsTablesView* views = nullptr;
  int32_t *context = nullptr, *window_begin = nullptr, *n_pick = nullptr;
  // A search period above 1 (cs:step), as the CPU's CsSelector: a unit searches at its steps 0,
  // period, 2 x period, ... of decoding (its counter, read and advanced here: [units]); between
  // them the search is skipped (skip [n x kv]) and its window starts where its last search's did
  // (last_window [units]), so every key since joins the last picks. units [n x kv]: each search's.
  int period = 1;
  int32_t* searches_done = nullptr;
  const int32_t* last_window = nullptr;
  uint8_t* skip = nullptr;
  int32_t* units = nullptr;
};
cudaError_t cs_step_args(const CsStepArgs& args, cudaStream_t stream);

// A search period's picks (cs:step > 1), per search s of unit units[s], after cs_select: one
// that searched saves its picks, count and window start as the unit's last (last_picks
// [units][keep_capacity]); a skipped one takes them back into its row of picks (max_picks apart)
// and pick_counts.
struct CsKeepArgs {
  int searches = 0, max_picks = 0, keep_capacity = 0;
  const uint8_t* skip = nullptr;
  const int32_t* units = nullptr;
  const int32_t* window_begin = nullptr;
  int32_t* picks = nullptr;
  int32_t* pick_counts = nullptr;
  int32_t* last_picks = nullptr;
  int32_t* last_count = nullptr;
  int32_t* last_window = nullptr;
};
cudaError_t cs_keep_picks(const CsKeepArgs& args, cudaStream_t stream);

// The token plan of `searches` searches in place: list s (row s of picks, max_picks apart) is
// its picks (ascending, below the window) then the window [window_begin[s], context[s]);
// lens[s] their count.
cudaError_t cs_token_plan(int32_t* picks, const int32_t* pick_counts, int max_picks, const int32_t* context,
                          const int32_t* window_begin, int searches, int32_t* lens, cudaStream_t stream);

}  // namespace skim::cuda
