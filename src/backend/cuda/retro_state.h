// RetroAttention's per-sequence state on the GPU (attention/retro_decode_args.h): for every
// sequence that runs a retro policy, a slot holding, per layer, its units' retrospective masks
// A (int32 per page; every query head a unit, gbsa using the first num_kv_heads) and the output
// cache of its last w-1 tokens' states; and the scratch of a step's plan. Slots are assigned
// outside steps (stage time); a fresh or reassigned slot starts with nothing loaded and nothing
// cached. Growing reallocates (the caller drops its graphs) and keeps every slot's state: a past
// row's cached output is never lost. The caches hold 63 entries (w <= 64) from the start.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "attention/retro_decode_args.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/sequence_slots.h"
#include "kv/page_pool.h"

namespace skim::cuda {

using RetroShape = SequenceStateShape;

class RetroState {
 public:
  explicit RetroState(const RetroShape& s) : s_(s) {}

  // The state, once a retro policy is registered (entries: its w - 1, at most 63).
  void reserve(int entries, bool& moved);
  bool active() const { return entries_ > 0; }
  int slot_for(const PageTable* t, int policy, bool& moved, cudaStream_t stream);
  void fork(const PageTable* from, const PageTable* to, bool& moved, cudaStream_t stream);
  void drop(const PageTable* t);

  RetroMaskView masks(int layer);
  RetroCacheView cache(int layer);

  struct Scratch {
    int32_t *table, *lens;
    uint32_t* masks;
    uint8_t* age;
    float *o, *lse;  // the kernel's states, room for the folded layout's 2 num_heads a row
    uint16_t* folded_q;  // [rows][2 num_heads][head_dim] (RetroPagePlanArgs::folded_q)
    void* workspace;
    size_t workspace_bytes;
    unsigned long long* tokens;  // [1]: the supplements' tokens, on the device
  };
  Scratch scratch();
  // The K/V bytes the supplements read so far (waits for `stream`).
  double bytes_read(cudaStream_t stream) const;

 private:
  void allocate(int slots, int entries);
  void clear(int slot, cudaStream_t stream);

  RetroShape s_;
  int entries_ = 0, slots_ = 0;
  SequenceSlots slots_of_;
  DeviceBuffer<int32_t> a_, step_;  // [layers][slots][heads][pages], [layers][slots][entries]
  DeviceBuffer<float> o_, lse_;     // [layers][slots][entries][heads][d], [layers][slots][entries][heads]
  DeviceBuffer<int32_t> table_, lens_;
  DeviceBuffer<uint32_t> masks_;
  DeviceBuffer<uint8_t> age_, workspace_;
  DeviceBuffer<float> states_;
  DeviceBuffer<uint16_t> folded_q_;
  DeviceBuffer<unsigned long long> tokens_;
};

}  // namespace skim::cuda
