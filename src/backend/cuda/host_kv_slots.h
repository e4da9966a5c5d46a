// KV beyond GPU memory (issue 18; docs/design.md "KV beyond GPU memory"): the device side of a
// forward whose K/V pools live in pinned host memory (GpuKVCache with host pools). Per layer and
// KV head a cache of `slots` pages of that head, head-major ([kv][slots][page_size][head_dim], as
// the decode kernel reads through page and head strides), and its map state
// (kv/page_cache_args.h). A decode step begins with begin_step (the device step counter, each
// row's written page); then, per layer whose plan lists pages per (row, KV head), map_layer maps
// each head's lists onto its slots (page_cache_map, the layer's heads in one launch), copies the
// misses from the host pool (page_cache_gather, one launch) and leaves the slot table the decode
// kernel reads. All of it inside the
// step's graph; a step with more distinct pages than slots sets a flag the host reads after it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "attention/paged_decode_args.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gpu_kv_cache.h"

namespace skim::cuda {

class HostKVSlots {
 public:
  // max_rows: a decode step's lists (one per sequence: the maps serve decode steps only; see
  // reserve_lists for the stages that list more). prefetch: room for prefetch_layer too.
  HostKVSlots(const KVCacheShape& shape, int slots, int max_rows, int max_pages_per_seq, bool prefetch = false);

  // The device bytes of a cache of `slots` slots (what the constructor allocates).
  static size_t device_bytes(const KVCacheShape& shape, int slots, int max_rows, int max_pages_per_seq,
                             bool prefetch = false);
  // `--host-kv-slots auto`: the most slots (at most the shape's pages) whose device bytes fit the
  // GPU's free memory less a reserve (kv/host_kv_budget.h). Error when not one fits.
  static int most_that_fit(const KVCacheShape& shape, int max_rows, int max_pages_per_seq, bool prefetch = false);

  int slots() const { return slots_; }
  // Room for `lists` lists a step (RetroAttention's past rows are rows of the step; MAC maps its
  // lists below and above each row's prefix end): grows the slot table and the written pages
  // (moved: the graphs point at the old ones). Between steps only.
  void reserve_lists(int lists, bool& moved);

  // The step's counter and each row's written page (positions, page_table: the staged inputs).
  void begin_step(int n, const int32_t* positions, const int32_t* page_table, cudaStream_t stream);
  // Layer l of the step: plan lists per (row, KV head) of host page ids (table [n][kv][max_pages],
  // lens [n][kv] tokens) mapped onto the slots, the misses copied from `cache`'s host pools. One
  // map a layer and step: a second would drop the written pages again, freeing slots the first's
  // lists read.
  void map_layer(int layer, int n, const int32_t* plan_table, const int32_t* plan_lens, GpuKVCache& cache,
                 cudaStream_t stream);
  // A map made ahead of layer l's own (issue 18's overlap: layer l's pages guessed while layer
  // l - 1 runs, on a second stream): the guessed lists' misses copied into slots the step before
  // did not use, stamped as the step before's, so layer l's map_layer finds them resident or
  // may evict them (kv/page_cache_args.h). Its own copy lists, counts and workspace: it runs
  // beside the previous layer's map_layer, and two sets (by layer parity: the next layer's
  // prefetch may start before this one's gather ends). Slots made with prefetch only.
  void prefetch_layer(int layer, int n, const int32_t* plan_table, const int32_t* plan_lens, GpuKVCache& cache,
                      cudaStream_t stream);
  // What the decode kernel reads after map_layer: the slot pools (head 0's base of the layer),
  // their strides (PagedDecodeArgs::page_stride, head_stride) and the slot table.
  uint16_t* k(int layer) { return k_.data() + size_t(layer) * layer_elems(); }
  uint16_t* v(int layer) { return v_.data() + size_t(layer) * layer_elems(); }
  size_t page_stride() const { return size_t(s_.page_size) * s_.head_dim; }
  size_t head_stride() const { return size_t(slots_) * page_stride(); }
  const int32_t* table(int first = 0) const { return table_.data() + size_t(first) * s_.num_kv_heads * max_pages_; }
  // `a` reading layer l's slots after map_layer: the pools, their strides and the slot table
  // from list `first` on, one page list per (row, KV head).
  void read_slots(int layer, PagedDecodeArgs& a, int first = 0) {
    a.k_pool = k(layer);
    a.v_pool = v(layer);
    a.page_stride = page_stride();
    a.head_stride = head_stride();
    a.page_table = table(first);
    a.tables_per_kv_head = true;
  }

  // Empties every cache (after a pass that wrote pages the map did not see: a prefill chunk).
  void invalidate(cudaStream_t stream);
  // The refusal flag: copied to the host on `stream` with the step's outputs (no sync of its
  // own), then read once the caller has waited for the stream (and cleared when set).
  void enqueue_refused_copy(cudaStream_t stream);
  bool refused(cudaStream_t stream);
  // Pages copied and hits since the start (waits for `stream`).
  struct Totals {
    uint64_t copies = 0, hits = 0;  // of the layers' own maps
    uint64_t prefetched = 0;        // pages copied ahead (prefetch_layer)
  };
  Totals totals(cudaStream_t stream) const;

 private:
  // Element counts of the buffers that grow with the slots, the shape or the rows: one place
  // for the constructor and device_bytes.
  struct Sizes {
    size_t pool, slot_of_page, per_slot, table, copies, workspace_bytes;
  };
  static Sizes sizes(const KVCacheShape& s, int slots, int max_rows, int max_pages_per_seq);
  // A map's copy lists, counts, workspace (zero between calls) and totals ([2] copies, hits).
  struct MapBuffers {
    DeviceBuffer<int32_t> copy_page, copy_slot, counts;
    DeviceBuffer<uint8_t> workspace;
    DeviceBuffer<unsigned long long> totals;
    void resize(const Sizes& z, int kv);
  };
  void map_and_gather(int layer, int n, const int32_t* plan_table, const int32_t* plan_lens, GpuKVCache& cache,
                      MapBuffers& m, bool prefetch, cudaStream_t stream);
  size_t layer_elems() const { return size_t(s_.num_kv_heads) * head_stride(); }
  size_t cache_index(int layer, int head) const { return size_t(layer) * s_.num_kv_heads + head; }

  KVCacheShape s_;
  int slots_ = 0, max_rows_ = 0, max_pages_ = 0;
  int step_rows_ = 0;                     // begin_step's rows: the written pages every map drops
  DeviceBuffer<uint16_t> k_, v_;          // [layers][kv][slots][page_size][head_dim]
  DeviceBuffer<int32_t> slot_of_page_;    // [layers][kv][num_pages]
  DeviceBuffer<int32_t> page_in_slot_;    // [layers][kv][slots]
  DeviceBuffer<int64_t> last_used_;       // [layers][kv][slots]
  DeviceBuffer<int32_t> table_;           // [max_rows][kv][max_pages] slots
  MapBuffers own_;    // the layers' own maps
  MapBuffers ahead_[2];  // the prefetches', by layer parity (empty without prefetch)
  DeviceBuffer<int32_t> written_, refused_;
  MappedHostBuffer<int32_t> refused_host_{1};  // pinned: the flag's copy
  DeviceBuffer<int64_t> step_;
};

}  // namespace skim::cuda
