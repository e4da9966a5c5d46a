// CSAttention's per-sequence state on the GPU (issue 18; the CPU policy is attention/csattn.h,
// docs/design.md "The GPU policy that joins them"): for every sequence slot, per indexed layer
// (from cs:dense_layers on) and KV group, the flat tables of CsGroupTables (centroids, lists of
// one stride S with each sequence's own capacity, sizes, tails) and the strided sample of the
// prompt's (query, head) vectors the build clusters. Unlike MAC's rings the tables are the
// sequence's state, not a cache: growing the slots copies them.
//
// A sequence's life: slot_for; for each prefill chunk begin_chunk (host bookkeeping of the
// sample), then prefill_layer per layer; build once at its first decode step (outside graphs),
// then decode_layer in every decode step's graph: the rows' new keys inserted, their searches,
// the token plan of picks + window. Nothing here allocates inside a step.
//
// The sample: the CPU keeps every prompt query and, at the build, clusters every
// ceil(vectors / points)-th. The GPU does not know a prompt's length before its last chunk (the
// scheduler appends chunk by chunk), so it keeps every stride-th vector in room for 2 x points
// and, when a chunk would overflow it, halves the sample in place and doubles the stride; the
// build then takes every ceil(kept / points)-th of those: between points / 2 and points vectors,
// evenly spread over the prompt as the CPU's are (not the same ones).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention/cs_sample_room.h"
#include "attention/csattn.h"
#include "backend/cuda/cs_step.cuh"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/sequence_slots.h"

namespace skim::cuda {

struct CsStateShape {
  int num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 16;
  int max_rows = 0;     // decode rows of a step
  int max_context = 0;  // tokens a sequence may hold
};

class CsState {
 public:
  CsState(const CsStateShape& shape, const CsParams& params);

  int list_stride() const { return stride_; }

  int slot_for(const PageTable* t, int policy, bool& moved, cudaStream_t stream);
  int slot_of(const PageTable* t) const { return slots_of_.slot_of(t); }
  void fork(const PageTable* from, const PageTable* to, bool& moved, cudaStream_t stream);
  void drop(const PageTable* t) { slots_of_.drop(t); }

  // A pass's rows on the device.
  struct StepInputs {
    const uint16_t* q = nullptr;          // [n][num_heads][head_dim] bf16
    const uint16_t* k_pool = nullptr;     // the layer's pool
    const int32_t* positions = nullptr;   // [n]
    const int32_t* page_table = nullptr;  // [n][max_pages_per_seq]
    int max_pages_per_seq = 0;
    const int32_t* row_slot = nullptr;    // [n]
  };
  // A prefill chunk of the sequence in `slot`, n rows from position `first` on (after its
  // earlier chunks): the sample's stride for it (halving the sample when it would overflow).
  void begin_chunk(int slot, int first, int n, cudaStream_t stream);
  // Layer `layer` of that chunk, rows [0, n) (in.row_slot: the slot's): before the build their
  // bf16 queries [n][num_heads][head_dim] are sampled; after it (a prompt appended once decoding
  // began) each row's new key is inserted, in position order, as the CPU's observe does (a
  // launch per row: one heap per list), keys already indexed (a rectification's) left alone. A
  // dense layer does nothing.
  void prefill_layer(int slot, int layer, int n, const StepInputs& in, cudaStream_t stream);
  // The rows of a decode step or steps of the slot reached `end` (positions below it indexed).
  void indexed_to(int slot, int end) {
    if (slot >= 0 && size_t(slot) < info_.size()) info_[size_t(slot)].indexed = std::max(info_[size_t(slot)].indexed, end);
  }
  // At the sequence's first decode step: every indexed layer's tables from the sample and the
  // keys [0, num_keys) of `k_pools` (per layer, [pages][kv][page_size][head_dim] bf16), the
  // sequence's pages `pages` (host ids); the lists' capacity from num_keys, as the CPU's.
  // Synchronises the stream (outside graphs, once a sequence).
  void build(int slot, int num_keys, const std::vector<const uint16_t*>& k_pools, const std::vector<int32_t>& pages,
             cudaStream_t stream);
  // Benchmarks: a prompt of `tokens` tokens from position 0 whose sample holds random queries
  // (a context of random K/V has none), as begin_chunk and prefill_layer would leave it.
  void random_sample(int slot, int tokens, uint64_t seed, cudaStream_t stream);
  bool built(int slot) const { return slot >= 0 && size_t(slot) < info_.size() && info_[size_t(slot)].built; }

  // One decode step's layer (an indexed one), every row a cs row with built tables (row_slot):
  // inserts the rows' new keys, searches, and leaves the token plan per (row, KV head) in
  // token_lists() [n x kv][max_context] / token_lens() [n x kv].
  void decode_layer(int layer, int n, const StepInputs& in, cudaStream_t stream);
  const int32_t* token_lists() const { return picks_.data(); }
  const int32_t* token_lens() const { return lens_.data(); }
  int max_tokens() const { return shape_.max_context; }

  // Whether `layer` attends every key (cs:dense_layers): no tables there.
  bool dense_layer(int layer) const { return layer < p_.dense_layers; }
  // Where every slot's tables and samples live (layers counted from the first indexed one).
  CsUnitLayout layout() const;
  int indexed_layer(int layer) const { return layer - p_.dense_layers; }
  int capacity(int slot) const { return info_[size_t(slot)].capacity; }

 private:
  struct SlotInfo {
    int first = -1;       // position of the first sampled row (-1: none yet)
    CsSampleRoom sample;  // the vectors offered, the stride kept (room: 2 x points)
    int capacity = 0;     // its lists' (at the build)
    int indexed = 0;   // keys [0, indexed) are in the lists (host bookkeeping)
    int insert_from = 0, chunk_first = 0;  // the current chunk after the build: its rows from insert_from on insert
    bool built = false;
  };
  void allocate(int slots);
  // A pass's per-(row, KV head) arguments for rows [0, n) of `in` at `layer` (cs_step_args).
  CsStepArgs step_args(int layer, int n, const StepInputs& in);
  CsInsertArgs insert_shapes() const;
  // The most picks a search keeps below its window: keep x max_context.
  int keep_capacity() const {
    return std::min(shape_.max_context, std::max(1, int(std::ceil(p_.keep * shape_.max_context))));
  }

  CsStateShape shape_;
  CsParams p_;
  int stride_ = 0, layers_ = 0, slots_ = 0;
  SequenceSlots slots_of_;
  std::vector<SlotInfo> info_;
  // [slots][layers][kv][...], slot-major (growing copies a prefix).
  DeviceBuffer<float> samples_, centroids_, tail_;
  DeviceBuffer<int32_t> index_, size_;
  DeviceBuffer<uint16_t> score_;
  DeviceBuffer<int32_t> capacities_;  // [slots]
  // A search period (cs:step > 1), per unit: its last search's picks [units][keep_capacity()],
  // their count, its window start, and its decode steps so far; per search of a step whether it
  // is skipped and its unit.
  DeviceBuffer<int32_t> last_picks_, last_count_, last_window_, searches_done_, search_units_;
  DeviceBuffer<uint8_t> skip_;
  // A decode step's scratch: [max_rows x kv] searches.
  DeviceBuffer<float> queries_, keys_;
  DeviceBuffer<CsInsertArgs> inserts_;
  DeviceBuffer<CsTablesView> views_;
  DeviceBuffer<int32_t> context_, window_begin_, n_pick_, pick_counts_, picks_, lens_;
  DeviceBuffer<uint8_t> select_ws_;
  // The build's: argument arrays and workspace for one layer's kv x M builds.
  DeviceBuffer<CsBuildArgsBf16> builds_;
  DeviceBuffer<uint8_t> build_ws_;
  DeviceBuffer<int32_t> build_pages_;
};

}  // namespace skim::cuda
