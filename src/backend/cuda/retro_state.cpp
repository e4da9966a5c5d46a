#include "backend/cuda/retro_state.h"

#include <algorithm>
#include <type_traits>

#include "backend/cuda/retro_decode.cuh"
#include "core/error.h"

namespace skim::cuda {

// The caches hold the registry's largest window (w <= 64 entries: RetroMergeArgs::entries_of)
// from the start: a past row's cached state must never be lost (its output would be its
// supplement alone), so they never change shape.
constexpr int kMaxEntries = 64;

void RetroState::reserve(int entries, bool& moved) {
  if (entries_ > 0 || entries <= 0) return;
  SKIM_REQUIRE(entries <= kMaxEntries, "retro: w = {} exceeds the GPU caches' {}", entries, kMaxEntries);
  allocate(4, kMaxEntries);
  moved = true;
}

namespace {

// A [layers][slots][per_slot] buffer grown to `slots`, the old slots' contents kept, the new
// ones filled with `byte`.
template <class T>
void grow_slots(DeviceBuffer<T>& buf, size_t layers, size_t old_slots, size_t slots, size_t per_slot, int byte) {
  DeviceBuffer<T> next(layers * slots * per_slot);
  check(cudaMemset(next.data(), byte, next.bytes()), "cudaMemset (retro state)");
  if (old_slots > 0)
    check(cudaMemcpy2D(next.data(), slots * per_slot * sizeof(T), buf.data(), old_slots * per_slot * sizeof(T),
                       old_slots * per_slot * sizeof(T), layers, cudaMemcpyDeviceToDevice),
          "cudaMemcpy2D (retro state)");
  buf = std::move(next);
}

}  // namespace

// Grows to `slots` slots, keeping what the existing ones hold.
void RetroState::allocate(int slots, int entries) {
  const size_t L = size_t(s_.num_layers), S = size_t(slots), E = size_t(entries), H = size_t(s_.num_heads),
               d = size_t(s_.head_dim), P = size_t(s_.max_pages_per_seq), R = size_t(s_.max_rows),
               kvh = size_t(s_.num_kv_heads), group = H / kvh, old = size_t(slots_);
  grow_slots(a_, L, old, S, H * P, 0xff);        // -1: never loaded
  grow_slots(step_, L, old, S, E, 0xff);         // -1: nothing cached
  grow_slots(o_, L, old, S, E * H * d, 0);
  grow_slots(lse_, L, old, S, E * H, 0);
  if (table_.size() == 0) {  // the scratch depends on the shape only
    table_.resize(R * kvh * P);
    lens_.resize(R * kvh);
    masks_.resize(R * kvh * P);
    age_.resize(R * kvh * P * group);
    states_.resize(2 * (R * H * d + R * H));  // the folded layout's 2 num_heads a row
    folded_q_.resize(R * 2 * H * d);
    // A past row's folded queries are never written (its lists are empty), but the kernel loads them.
    check(cudaMemset(folded_q_.data(), 0, folded_q_.bytes()), "cudaMemset (retro folded queries)");
    RetroPagePlanArgs a{.num_pool_pages = s_.num_pool_pages};
    workspace_.resize(std::max<size_t>(1, retro_page_plan_workspace_size(a)));
    tokens_.resize(1);
    check(cudaMemset(tokens_.data(), 0, tokens_.bytes()), "cudaMemset (retro counter)");
  }
  check(cudaDeviceSynchronize(), "retro state");  // done before the forward's stream uses it
  entries_ = entries;
  slots_of_.add(slots_, slots);
  slots_ = slots;
}

// A slot with nothing loaded and nothing cached, in every layer.
void RetroState::clear(int slot, cudaStream_t stream) {
  const size_t H = size_t(s_.num_heads), P = size_t(s_.max_pages_per_seq), E = size_t(entries_);
  check(cudaMemset2DAsync(a_.data() + size_t(slot) * H * P, size_t(slots_) * H * P * sizeof(int32_t), 0xff,
                          H * P * sizeof(int32_t), size_t(s_.num_layers), stream),
        "cudaMemset2DAsync (retro masks)");
  check(cudaMemset2DAsync(step_.data() + size_t(slot) * E, size_t(slots_) * E * sizeof(int32_t), 0xff,
                          E * sizeof(int32_t), size_t(s_.num_layers), stream),
        "cudaMemset2DAsync (retro cache)");
}

int RetroState::slot_for(const PageTable* t, int policy, bool& moved, cudaStream_t stream) {
  SKIM_REQUIRE(active(), "retro: no state reserved (a retro policy must be acquired first)");
  const SequenceSlots::Claim claim = slots_of_.claim_or_grow(t, policy, [&] {
    check(cudaStreamSynchronize(stream), "forward pass");  // buffers move: nothing may use them
    allocate(std::max(2 * slots_, 4), entries_);  // the slots keep their state
    moved = true;
  });
  if (claim.fresh) clear(claim.slot, stream);  // a new slot, or another policy: from empty
  return claim.slot;
}

void RetroState::fork(const PageTable* from, const PageTable* to, bool& moved, cudaStream_t stream) {
  const int from_policy = slots_of_.policy_of(from);
  if (from_policy < 0) return;
  const int dst = slot_for(to, from_policy, moved, stream), from_slot = slots_of_.slot_of(from);
  const size_t L = size_t(s_.num_layers), H = size_t(s_.num_heads), P = size_t(s_.max_pages_per_seq),
               E = size_t(entries_), d = size_t(s_.head_dim);
  auto copy = [&](auto& buf, size_t per_slot) {
    using T = std::remove_reference_t<decltype(*buf.data())>;
    const size_t pitch = size_t(slots_) * per_slot * sizeof(T);
    check(cudaMemcpy2DAsync(buf.data() + size_t(dst) * per_slot, pitch, buf.data() + size_t(from_slot) * per_slot,
                            pitch, per_slot * sizeof(T), L, cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpy2DAsync (retro state)");
  };
  copy(a_, H * P);
  copy(step_, E);
  copy(o_, E * H * d);
  copy(lse_, E * H);
}

void RetroState::drop(const PageTable* t) { slots_of_.drop(t); }

RetroMaskView RetroState::masks(int layer) {
  const size_t per_layer = size_t(slots_) * s_.num_heads * s_.max_pages_per_seq;
  return {.a = a_.data() + size_t(layer) * per_layer, .units = s_.num_heads, .stride = s_.max_pages_per_seq};
}

RetroCacheView RetroState::cache(int layer) {
  const size_t S = size_t(slots_), E = size_t(entries_), H = size_t(s_.num_heads), d = size_t(s_.head_dim),
               l = size_t(layer);
  return {.entries = entries_, .o = o_.data() + l * S * E * H * d, .lse = lse_.data() + l * S * E * H,
          .step = step_.data() + l * S * E};
}

RetroState::Scratch RetroState::scratch() {
  const size_t R = size_t(s_.max_rows), H = size_t(s_.num_heads), d = size_t(s_.head_dim);
  return {.table = table_.data(), .lens = lens_.data(), .masks = masks_.data(), .age = age_.data(),
          .o = states_.data(), .lse = states_.data() + 2 * R * H * d, .folded_q = folded_q_.data(),
          .workspace = workspace_.data(),
          .workspace_bytes = workspace_.bytes(), .tokens = tokens_.data()};
}

double RetroState::bytes_read(cudaStream_t stream) const {
  if (tokens_.size() == 0) return 0;
  unsigned long long n = 0;
  check(cudaStreamSynchronize(stream), "forward pass");
  check(cudaMemcpy(&n, tokens_.data(), sizeof n, cudaMemcpyDeviceToHost), "cudaMemcpy (retro counter)");
  return double(n) * 2.0 * s_.head_dim * sizeof(uint16_t);  // a list is one KV head's K and V
}

}  // namespace skim::cuda
