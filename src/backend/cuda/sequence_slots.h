// Which slot of a per-sequence device state (MAC's rings, RetroAttention's masks and caches) each
// sequence holds, and under which policy index: host bookkeeping, outside steps.
#pragma once

#include <optional>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "kv/page_pool.h"

namespace skim::cuda {

// What a per-sequence device state is sized by: the model's shape and the forward's bounds.
struct SequenceStateShape {
  int num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int max_rows = 0, max_pages_per_seq = 0, num_pool_pages = 0;
};

class SequenceSlots {
 public:
  struct Claim {
    int slot = -1;
    bool fresh = false;  // a new slot, or the sequence's policy changed: its state starts empty
  };
  // The slot of `t` under policy index `policy`; none when `t` has none and none is free (the
  // caller grows its state, add()s the new slots and claims again).
  std::optional<Claim> claim(const PageTable* t, int policy) {
    auto it = owners_.find(t);
    if (it != owners_.end()) {
      const bool changed = it->second.policy != policy;
      it->second.policy = policy;
      return Claim{it->second.slot, changed};
    }
    if (free_.empty()) return std::nullopt;
    const int slot = free_.back();
    free_.pop_back();
    owners_[t] = Owner{slot, policy};
    return Claim{slot, true};
  }
  // claim(), growing the state first when no slot is free: grow() reallocates and add()s the
  // new slots.
  template <class Grow>
  Claim claim_or_grow(const PageTable* t, int policy, Grow grow) {
    std::optional<Claim> c = claim(t, policy);
    if (!c) {
      grow();
      c = claim(t, policy);
    }
    SKIM_REQUIRE(c.has_value(), "sequence slots: growing the state freed no slot");
    return *c;
  }
  void add(int from, int to) {  // slots [from, to) exist now, free
    for (int s = to - 1; s >= from; --s) free_.push_back(s);
  }
  void drop(const PageTable* t) {
    auto it = owners_.find(t);
    if (it == owners_.end()) return;
    free_.push_back(it->second.slot);
    owners_.erase(it);
  }
  int slot_of(const PageTable* t) const {
    auto it = owners_.find(t);
    return it == owners_.end() ? -1 : it->second.slot;
  }
  int policy_of(const PageTable* t) const {
    auto it = owners_.find(t);
    return it == owners_.end() ? -1 : it->second.policy;
  }

 private:
  struct Owner {
    int slot = -1, policy = -1;
  };
  std::unordered_map<const PageTable*, Owner> owners_;
  std::vector<int> free_;
};

}  // namespace skim::cuda
