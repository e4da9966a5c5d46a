// KV beyond GPU memory with `--host-kv-slots auto` (kHostKvSlotsAuto): how many
// device cache slots per layer and KV head a GPU gives the page cache (kv/page_cache_args.h).
// Host arithmetic only; the GPU forward measures its free memory once its own buffers are
// allocated and asks these. The more slots, the more of a step's selected pages are already
// resident (hits) and the fewer cross PCIe (quest at 5% over 512K copied 5.2 GB a step with
// 8192 slots, 53% hits, on an H100).
#pragma once

#include <algorithm>
#include <cstdint>

namespace skim {

// host_kv_slots' value for "as many slots as the GPU's free memory holds" (EngineOptions,
// GpuForwardOptions).
inline constexpr int kHostKvSlotsAuto = -1;

// Slots per layer and KV head at most (the option's range).
inline constexpr int64_t kHostKvMaxSlots = int64_t(1) << 20;

// Device memory left for what is allocated after the cache: policies acquired later (their
// workspaces, cs's tables), a prompt's layer pools, CUDA graphs. A tenth of the device, at least
// 2 GiB.
inline constexpr int64_t kHostKvMinReserve = int64_t(2) << 30;

// The bytes the cache may take of `free` device bytes on a device of `total`: free less the
// reserve, 0 when the reserve takes it all.
inline int64_t host_kv_cache_budget(int64_t free, int64_t total) {
  return std::max<int64_t>(0, free - std::max(kHostKvMinReserve, total / 10));
}

// The most slots n in [1, max_slots] whose device bytes `bytes(n)` (nondecreasing in n) fit
// `budget`; 0 when not even one does.
template <class Bytes>
int64_t most_slots_within(int64_t budget, int64_t max_slots, Bytes bytes) {
  if (max_slots < 1 || bytes(int64_t(1)) > budget) return 0;
  int64_t lo = 1, hi = max_slots;  // bytes(lo) fits; the answer lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (bytes(mid) <= budget) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace skim
