// MAC-Attention's per-sequence state on the GPU (attention/mac_decode_args.h): for every
// sequence that runs a MAC policy, a ring slot holding, per layer, its last K tokens' pre-RoPE
// queries (bf16) and prefix states (fp32), and the scratch the decode stages use. Rings are a
// cache: a row that finds nothing reads its base policy's keys, so a ring that restarts empty
// (its sequence's policy changed, or the rings grew) costs hits, never correctness.
//
// Slots are assigned outside steps (stage time); growing the slots or the ring capacity
// reallocates (the caller drops its graphs). Nothing here allocates inside a step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "attention/mac_decode_args.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/sequence_slots.h"
#include "kv/page_pool.h"

namespace skim::cuda {

using MacShape = SequenceStateShape;

class MacState {
 public:
  explicit MacState(const MacShape& s) : s_(s) {}

  // Rings of at least `capacity` entries (the registered MAC policies' largest window).
  void reserve(int capacity, bool& moved);
  bool active() const { return capacity_ > 0; }
  int capacity() const { return capacity_; }
  // The ring slot of a sequence that runs the MAC policy at index `policy`: its own, a fresh
  // one (empty) when it had none or ran another policy. May grow the slots (moved).
  int slot_for(const PageTable* t, int policy, bool& moved, cudaStream_t stream);
  // The slot of `t` or -1 (a sequence that has run no MAC step).
  int slot_of(const PageTable* t) const;
  // `to` (a copy of `from`'s pages) gets a copy of from's rings; enqueued on `stream`. May grow
  // the slots (moved).
  void fork(const PageTable* from, const PageTable* to, bool& moved, cudaStream_t stream);
  void drop(const PageTable* t);

  // One layer's rings, for the kernels.
  MacRingsView rings(int layer);

  // Scratch of one decode step's layer (max_rows rows).
  struct Scratch {
    int32_t *band_begin, *hit_entry, *below_table, *below_lens, *above_table, *above_lens, *prefix_lens;
    uint32_t *below_masks, *above_masks;
    uint32_t* below_listed;  // mac+art: each below list's heads (MacPagePlanArgs::below_listed)
    float *below_o, *below_lse, *above_o, *above_lse;
    void* plan_workspace;
    size_t plan_workspace_bytes;
    unsigned long long* bytes;   // [2]: K/V tokens the cut lists hold, and ring bytes
  };
  Scratch scratch();
  // The same with `rows` rows' `above` parts right after their `below` parts (lists, lengths,
  // masks, states), so that one attention call of 2 x rows rows attends both.
  Scratch packed_scratch(int rows);
  // K/V and ring bytes MAC rows read so far (reads the device counters: waits for `stream`).
  double bytes_read(cudaStream_t stream) const;

 private:
  void allocate(int slots, int capacity);
  void clear_fill(int slot, cudaStream_t stream);

  MacShape s_;
  int capacity_ = 0, slots_ = 0;
  SequenceSlots slots_of_;
  // [layers][slots][capacity][heads][head_dim] and the like; fill [layers][slots][kMacFillInts].
  DeviceBuffer<uint16_t> q_pre_;
  DeviceBuffer<float> o_, lse_;
  DeviceBuffer<int32_t> pos_, fill_;
  // Scratch.
  DeviceBuffer<int32_t> ints_;
  DeviceBuffer<uint32_t> masks_;
  DeviceBuffer<float> states_;
  DeviceBuffer<uint8_t> workspace_;
  DeviceBuffer<unsigned long long> bytes_;
};

}  // namespace skim::cuda
