#include "backend/cuda/mac_state.h"

#include <algorithm>
#include <type_traits>

#include "backend/cuda/mac_decode.cuh"
#include "core/error.h"

namespace skim::cuda {

void MacState::reserve(int capacity, bool& moved) {
  if (capacity <= capacity_) return;
  allocate(std::max(slots_, 4), capacity);
  moved = true;
}

// Every buffer for `slots` slots of `capacity` entries: the rings restart empty (a cache), the
// sequences keep their slots.
void MacState::allocate(int slots, int capacity) {
  const size_t L = size_t(s_.num_layers), S = size_t(slots), K = size_t(capacity), H = size_t(s_.num_heads),
               d = size_t(s_.head_dim), R = size_t(s_.max_rows), kvh = size_t(s_.num_kv_heads),
               P = size_t(s_.max_pages_per_seq);
  q_pre_.resize(L * S * K * H * d);
  o_.resize(L * S * K * H * d);
  lse_.resize(L * S * K * H);
  pos_.resize(L * S * K);
  fill_.resize(L * S * kMacFillInts);
  check(cudaMemset(fill_.data(), 0, fill_.bytes()), "cudaMemset (MAC rings)");
  check(cudaDeviceSynchronize(), "MAC rings");  // done before the forward's stream uses them
  if (ints_.size() == 0) {  // the scratch depends on the shape only
    ints_.resize(2 * R * H + 2 * R * kvh * P + 2 * R * kvh + R);
    masks_.resize(2 * R * kvh * P + R * kvh);  // below's and above's masks, below_listed
    states_.resize(2 * R * H * d + 2 * R * H);
    MacPagePlanArgs a{.batch = s_.max_rows, .num_heads = s_.num_heads, .num_kv_heads = s_.num_kv_heads,
                      .max_pages_per_seq = s_.max_pages_per_seq, .num_pool_pages = s_.num_pool_pages};
    const size_t ws = mac_page_plan_workspace_size(a);
    SKIM_REQUIRE(ws > 0, "mac: the GPU page plan does not support this model's shape ({} query heads per KV head)",
                 s_.num_heads / s_.num_kv_heads);
    workspace_.resize(ws);
    bytes_.resize(2);
    check(cudaMemset(bytes_.data(), 0, bytes_.bytes()), "cudaMemset (MAC counters)");
  }
  capacity_ = capacity;
  slots_of_.add(slots_, slots);
  slots_ = slots;
}

void MacState::clear_fill(int slot, cudaStream_t stream) {
  // fill [layers][slots][kMacFillInts]: the slot's ints in every layer.
  check(cudaMemset2DAsync(fill_.data() + kMacFillInts * slot, size_t(slots_) * kMacFillInts * sizeof(int32_t), 0,
                          kMacFillInts * sizeof(int32_t),
                          size_t(s_.num_layers), stream),
        "cudaMemset2DAsync (MAC ring)");
}

int MacState::slot_for(const PageTable* t, int policy, bool& moved, cudaStream_t stream) {
  SKIM_REQUIRE(active(), "mac: no ring capacity reserved (a MAC policy must be acquired first)");
  const SequenceSlots::Claim claim = slots_of_.claim_or_grow(t, policy, [&] {
    check(cudaStreamSynchronize(stream), "forward pass");  // buffers move: nothing may use them
    allocate(std::min(std::max(2 * slots_, 4), std::max(slots_ + 1, s_.max_rows)), capacity_);  // every ring restarts empty
    moved = true;
  });
  if (claim.fresh) clear_fill(claim.slot, stream);  // a new slot, or another policy: from empty
  return claim.slot;
}

int MacState::slot_of(const PageTable* t) const { return slots_of_.slot_of(t); }

void MacState::fork(const PageTable* from, const PageTable* to, bool& moved, cudaStream_t stream) {
  const int from_policy = slots_of_.policy_of(from);
  if (from_policy < 0) return;
  const int dst = slot_for(to, from_policy, moved, stream);
  const int from_slot = slots_of_.slot_of(from);
  const size_t L = size_t(s_.num_layers), K = size_t(capacity_), H = size_t(s_.num_heads), d = size_t(s_.head_dim);
  auto copy = [&](auto& buf, size_t per_slot) {  // [layers][slots][per_slot]: the slot in every layer
    using T = std::remove_reference_t<decltype(*buf.data())>;
    const size_t pitch = size_t(slots_) * per_slot * sizeof(T);
    check(cudaMemcpy2DAsync(buf.data() + size_t(dst) * per_slot, pitch, buf.data() + size_t(from_slot) * per_slot,
                            pitch, per_slot * sizeof(T), L, cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpy2DAsync (MAC rings)");
  };
  copy(q_pre_, K * H * d);
  copy(o_, K * H * d);
  copy(lse_, K * H);
  copy(pos_, K);
  copy(fill_, kMacFillInts);
}

void MacState::drop(const PageTable* t) { slots_of_.drop(t); }

MacRingsView MacState::rings(int layer) {
  const size_t S = size_t(slots_), K = size_t(capacity_), H = size_t(s_.num_heads), d = size_t(s_.head_dim);
  const size_t l = size_t(layer);
  return {.capacity = capacity_, .q_pre = q_pre_.data() + l * S * K * H * d, .o = o_.data() + l * S * K * H * d,
          .lse = lse_.data() + l * S * K * H, .pos = pos_.data() + l * S * K, .fill = fill_.data() + l * S * kMacFillInts};
}

MacState::Scratch MacState::packed_scratch(int rows) {
  SKIM_REQUIRE(rows >= 0 && rows <= s_.max_rows, "mac: {} rows, at most {}", rows, s_.max_rows);
  const size_t n = size_t(rows), H = size_t(s_.num_heads), d = size_t(s_.head_dim), kvh = size_t(s_.num_kv_heads),
               P = size_t(s_.max_pages_per_seq);
  Scratch x = scratch();  // each part holds max_rows rows: below's and above's regions are adjacent
  x.above_table = x.below_table + n * kvh * P;
  x.above_lens = x.below_lens + n * kvh;
  x.above_masks = x.below_masks + n * kvh * P;
  x.above_o = x.below_o + n * H * d;
  x.above_lse = x.below_lse + n * H;
  return x;
}

MacState::Scratch MacState::scratch() {
  const size_t R = size_t(s_.max_rows), H = size_t(s_.num_heads), d = size_t(s_.head_dim),
               kvh = size_t(s_.num_kv_heads), P = size_t(s_.max_pages_per_seq);
  int32_t* i = ints_.data();
  float* f = states_.data();
  Scratch x;
  x.band_begin = i;
  x.hit_entry = i + R * H;
  x.below_table = i + 2 * R * H;
  x.above_table = x.below_table + R * kvh * P;
  x.below_lens = x.above_table + R * kvh * P;
  x.above_lens = x.below_lens + R * kvh;
  x.prefix_lens = x.above_lens + R * kvh;
  x.below_masks = masks_.data();
  x.above_masks = masks_.data() + R * kvh * P;
  x.below_listed = masks_.data() + 2 * R * kvh * P;
  x.below_o = f;
  x.above_o = f + R * H * d;
  x.below_lse = f + 2 * R * H * d;
  x.above_lse = x.below_lse + R * H;
  x.plan_workspace = workspace_.data();
  x.plan_workspace_bytes = workspace_.bytes();
  x.bytes = bytes_.data();
  return x;
}

double MacState::bytes_read(cudaStream_t stream) const {
  if (bytes_.size() == 0) return 0;
  unsigned long long b[2] = {0, 0};
  check(cudaStreamSynchronize(stream), "forward pass");
  check(cudaMemcpy(b, bytes_.data(), sizeof b, cudaMemcpyDeviceToHost), "cudaMemcpy (MAC counters)");
  return double(b[0]) * 2.0 * s_.head_dim * sizeof(uint16_t) + double(b[1]);  // a list is one KV head's K and V
}

}  // namespace skim::cuda
