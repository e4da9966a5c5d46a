// Random MAC rings and a decode batch over them, for the match and merge-and-push tests (CPU:
// tests/attention/mac_decode_test.cpp, against the definition; GPU: against the CPU): a few
// ring slots partly or wholly filled (the oldest entry anywhere), bf16 pre-RoPE queries with
// some rows' heads copying an entry's query exactly (hits) and the rest random (misses), states
// below / above the split for the merge. Rows may have no slot or an inactive rule. Pointers are
// left for the caller (host or device). No gtest here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/mac_decode_args.h"
#include "core/dtype.h"
#include "test_random.h"

namespace skim::test {

struct MacRingCase {
  int batch, heads, d, slots, capacity, page_size = 16;
  std::vector<MacRowRule> rules;  // [0] active, [1] inactive
  std::vector<int32_t> row_slot, row_policy, positions, fill, pos;
  std::vector<uint16_t> q_pre, ring_q;
  std::vector<float> ring_o, ring_lse, below_o, below_lse, above_o, above_lse;

  // The latest view of slot s's fill (MacRingsView; the case makes both views equal).
  int first(int s) const { return fill[size_t(kMacFillInts) * s + 2]; }
  int count(int s) const { return fill[size_t(kMacFillInts) * s + 3]; }

  MacRingCase(int batch_, int heads_, int d_, int window)
      : batch(batch_), heads(heads_), d(d_), slots(batch_ + 1), capacity(window + 3) {
    // Row 1 (position 1001) is below the rule's min_context: it matches nothing.
    rules = {MacRowRule{.active = 1, .window = window, .band = random_int(0, 100), .tau = 0.5f, .min_context = 1003},
             MacRowRule{.active = 0}};
    fill.resize(size_t(slots) * kMacFillInts);
    pos.assign(size_t(slots) * capacity, -1);
    for (int s = 0; s < slots; ++s) {
      const int n = random_int(s == 2 ? 1 : 0, window);  // row 2's slot holds entries (see below)
      const int oldest = n < window ? 0 : random_int(0, window - 1);
      for (int view = 0; view < 2; ++view) {
        fill[size_t(kMacFillInts) * s + 2 * view] = oldest;
        fill[size_t(kMacFillInts) * s + 2 * view + 1] = n;
      }
      for (int i = 0; i < n; ++i) pos[size_t(s) * capacity + (oldest + i) % window] = 300 + 7 * i;
    }
    ring_q = bf16_vector(size_t(slots) * capacity * heads * d);
    ring_o = random_vector(size_t(slots) * capacity * heads * d);
    ring_lse = random_vector(size_t(slots) * capacity * heads, 3.0f);
    q_pre = bf16_vector(size_t(batch) * heads * d);
    for (int b = 0; b < batch; ++b) {
      row_slot.push_back(b == 0 ? -1 : b);  // row 0 has no ring; the others their own slot
      row_policy.push_back(b == batch - 1 ? 1 : 0);  // the last row's policy has no MAC
      positions.push_back(1000 + b);
      const int s = row_slot.back(), n = s < 0 ? 0 : count(s);
      for (int h = 0; h < heads; ++h)
        // Copy an entry's query: a hit (distance 0); always row 2's head 0, so that every case has one.
        if (n > 0 && (random_int(0, 1) || (b == 2 && h == 0))) {
          const int e = (first(s) + random_int(0, n - 1)) % window;
          std::copy_n(ring_q.begin() + long(((size_t(s) * capacity + e) * heads + h) * d), d,
                      q_pre.begin() + long((size_t(b) * heads + h) * d));
        }
    }
    below_o = random_vector(size_t(batch) * heads * d);
    above_o = random_vector(size_t(batch) * heads * d);
    below_lse = random_vector(size_t(batch) * heads, 3.0f);
    above_lse = random_vector(size_t(batch) * heads, 3.0f);
    below_lse[1] = above_lse[2] = -INFINITY;  // empty parts merge as nothing
  }

  static std::vector<uint16_t> bf16_vector(size_t n) {
    std::vector<float> f = random_vector(n);
    std::vector<uint16_t> v(n);
    std::transform(f.begin(), f.end(), v.begin(), f32_to_bf16);
    return v;
  }
};

}  // namespace skim::test
