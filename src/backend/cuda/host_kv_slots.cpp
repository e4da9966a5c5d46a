#include "backend/cuda/host_kv_slots.h"

#include <algorithm>

#include "backend/cuda/page_cache.cuh"
#include "core/error.h"
#include "kv/host_kv_budget.h"

namespace skim::cuda {

HostKVSlots::Sizes HostKVSlots::sizes(const KVCacheShape& s, int slots, int max_rows, int max_pages_per_seq) {
  const size_t caches = size_t(s.num_layers) * s.num_kv_heads;
  return Sizes{.pool = caches * slots * s.page_size * s.head_dim,  // K, and V the same
               .slot_of_page = caches * s.num_pages,
               .per_slot = caches * slots,  // page_in_slot, last_used
               .table = size_t(max_rows) * s.num_kv_heads * max_pages_per_seq,
               .copies = size_t(s.num_kv_heads) * slots,  // a layer's heads at once
               .workspace_bytes = page_cache_workspace_size(s.num_pages, slots, s.num_kv_heads)};
}

size_t HostKVSlots::device_bytes(const KVCacheShape& s, int slots, int max_rows, int max_pages_per_seq,
                                 bool prefetch) {
  const Sizes z = sizes(s, slots, max_rows, max_pages_per_seq);
  const size_t map = 2 * z.copies * sizeof(int32_t) + z.workspace_bytes;  // a map's copy lists and workspace
  return 2 * z.pool * sizeof(uint16_t) + z.slot_of_page * sizeof(int32_t) +
         z.per_slot * (sizeof(int32_t) + sizeof(int64_t)) + z.table * sizeof(int32_t) + (prefetch ? 3 : 1) * map;
}

int HostKVSlots::most_that_fit(const KVCacheShape& s, int max_rows, int max_pages_per_seq, bool prefetch) {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  const int64_t budget = host_kv_cache_budget(int64_t(free), int64_t(total));
  const int64_t most = std::min<int64_t>(s.num_pages, kHostKvMaxSlots);
  const int64_t slots = most_slots_within(budget, most, [&](int64_t n) {
    return int64_t(device_bytes(s, int(n), max_rows, max_pages_per_seq, prefetch));
  });
  SKIM_REQUIRE(slots > 0,
               "host_kv_slots auto: {:.2f} GiB of the GPU's memory free beside the weights, less a reserve of "
               "{:.2f} GiB, hold no cache slot ({:.2f} MiB a slot per layer and KV head); give --host-kv-slots N",
               free / 1073741824.0, (int64_t(free) - budget) / 1073741824.0,
               device_bytes(s, 1, max_rows, max_pages_per_seq, prefetch) / 1048576.0);
  return int(slots);
}

HostKVSlots::HostKVSlots(const KVCacheShape& s, int slots, int max_rows, int max_pages_per_seq, bool prefetch)
    : s_(s), slots_(slots), max_rows_(max_rows), max_pages_(max_pages_per_seq) {
  SKIM_REQUIRE(slots > 0 && max_rows > 0 && max_pages_per_seq > 0, "host KV: {} slots, {} rows, {} pages a sequence",
               slots, max_rows, max_pages_per_seq);
  const Sizes z = sizes(s, slots, max_rows, max_pages_per_seq);
  k_.resize(z.pool);
  v_.resize(z.pool);
  slot_of_page_.resize(z.slot_of_page);
  page_in_slot_.resize(z.per_slot);
  last_used_.resize(z.per_slot);
  table_.resize(z.table);
  own_.resize(z, s.num_kv_heads);
  written_.resize(size_t(max_rows));
  refused_.resize(1);
  step_.resize(1);
  check(cudaMemset(refused_.data(), 0, refused_.bytes()), "cudaMemset");
  *refused_host_.host() = 0;
  check(cudaMemset(step_.data(), 0, step_.bytes()), "cudaMemset");
  if (prefetch)
    for (MapBuffers& m : ahead_) m.resize(z, s.num_kv_heads);
  for (MapBuffers* m : {&own_, &ahead_[0], &ahead_[1]}) {
    if (m->totals.size() == 0) continue;
    check(cudaMemset(m->workspace.data(), 0, m->workspace.bytes()), "cudaMemset (page cache workspace)");
    check(cudaMemset(m->totals.data(), 0, m->totals.bytes()), "cudaMemset");
  }
  invalidate(nullptr);
  check(cudaDeviceSynchronize(), "host KV slots");
}

void HostKVSlots::reserve_lists(int lists, bool& moved) {
  if (lists <= max_rows_) return;
  max_rows_ = lists;
  table_.resize(sizes(s_, slots_, lists, max_pages_).table);
  written_.resize(size_t(lists));
  moved = true;
}

void HostKVSlots::begin_step(int n, const int32_t* positions, const int32_t* page_table, cudaStream_t stream) {
  SKIM_REQUIRE(n <= max_rows_, "host KV: {} rows, at most {}", n, max_rows_);
  step_rows_ = n;
  check(page_cache_begin_step(step_.data(), positions, page_table, n, max_pages_, s_.page_size, written_.data(), stream),
        "page_cache_begin_step");
}

void HostKVSlots::map_layer(int layer, int n, const int32_t* plan_table, const int32_t* plan_lens, GpuKVCache& cache,
                            cudaStream_t stream) {
  map_and_gather(layer, n, plan_table, plan_lens, cache, own_, /*prefetch=*/false, stream);
}

void HostKVSlots::prefetch_layer(int layer, int n, const int32_t* plan_table, const int32_t* plan_lens,
                                 GpuKVCache& cache, cudaStream_t stream) {
  MapBuffers& m = ahead_[layer % 2];
  SKIM_REQUIRE(m.counts.size() > 0, "host KV: prefetch_layer on slots made without prefetch");
  map_and_gather(layer, n, plan_table, plan_lens, cache, m, /*prefetch=*/true, stream);
}

void HostKVSlots::MapBuffers::resize(const Sizes& z, int kv) {
  copy_page.resize(z.copies);
  copy_slot.resize(z.copies);
  counts.resize(size_t(kv) * 3);
  workspace.resize(z.workspace_bytes);
  totals.resize(2);
}

// A prefetch's gather runs beside the step's compute: it takes a few CTAs a KV head (32 at the
// 8B shape's 8), which keep enough 8 KB copies in flight for the PCIe link (bench/
// host_gather_bw.cu), where the layer's own gather, which nothing else waits beside, takes the
// whole GPU. At 128 a cache the prefetch's gathers held every SM and the step got no faster
// (2026-11-27).
constexpr int kPrefetchGatherCtasPerCache = 4;

void HostKVSlots::map_and_gather(int layer, int n, const int32_t* plan_table, const int32_t* plan_lens,
                                 GpuKVCache& cache, MapBuffers& m, bool prefetch, cudaStream_t stream) {
  SKIM_REQUIRE(n <= max_rows_, "host KV: {} lists, room for {}", n, max_rows_);
  const int kv = s_.num_kv_heads;
  const size_t piece = page_stride(), c = cache_index(layer, 0);
  // The layer's KV heads in one map launch (a CTA each) and one gather: head h's lists are
  // plan_table + h x max_pages, its state cache c + h's. A prefetch writes no slot table and
  // sets no refusal flag (kv/page_cache_args.h).
  const PageCacheArgs a{.lists = n, .max_pages = max_pages_, .table = plan_table,
                        .slot_table = prefetch ? nullptr : table_.data(), .list_stride = kv * max_pages_,
                        .slot_stride = kv * max_pages_, .list_lens = plan_lens, .lens_stride = kv,
                        .page_size = s_.page_size, .slots = slots_, .num_host_pages = s_.num_pages,
                        .slot_of_page = slot_of_page_.data() + c * s_.num_pages,
                        .page_in_slot = page_in_slot_.data() + c * slots_, .last_used = last_used_.data() + c * slots_,
                        .step_counter = step_.data(), .prefetch = prefetch, .written = written_.data(),
                        .num_written = step_rows_, .copy_page = m.copy_page.data(), .copy_slot = m.copy_slot.data(),
                        .counts = m.counts.data(), .refused_flag = prefetch ? nullptr : refused_.data(),
                        .totals = m.totals.data()};
  const PageCacheBatch heads{.caches = kv, .table = size_t(max_pages_), .slot_table = size_t(max_pages_), .lens = 1};
  check(page_cache_map(a, {m.workspace.data(), m.workspace.bytes()}, stream, heads), "page_cache_map");
  check(page_cache_gather({.copy_page = m.copy_page.data(), .copy_slot = m.copy_slot.data(), .counts = m.counts.data(),
                           .max_copies = slots_, .host_k = cache.k(layer), .host_v = cache.v(layer), .slot_k = k(layer),
                           .slot_v = v(layer), .page_elems = piece, .host_page_stride = size_t(kv) * piece,
                           .caches = kv, .host_cache_stride = piece, .slot_cache_stride = head_stride(),
                           .ctas_per_cache = prefetch ? kPrefetchGatherCtasPerCache : 0},
                          stream),
        "page_cache_gather");
}

void HostKVSlots::invalidate(cudaStream_t stream) {
  check(cudaMemsetAsync(slot_of_page_.data(), 0xff, slot_of_page_.bytes(), stream), "cudaMemsetAsync");  // -1
  check(cudaMemsetAsync(page_in_slot_.data(), 0xff, page_in_slot_.bytes(), stream), "cudaMemsetAsync");
  check(cudaMemsetAsync(last_used_.data(), 0xff, last_used_.bytes(), stream), "cudaMemsetAsync");
}

void HostKVSlots::enqueue_refused_copy(cudaStream_t stream) {
  check(cudaMemcpyAsync(refused_host_.host(), refused_.data(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync (host KV refusal)");
}

bool HostKVSlots::refused(cudaStream_t stream) {
  if (*refused_host_.host() == 0) return false;
  *refused_host_.host() = 0;
  check(cudaMemsetAsync(refused_.data(), 0, refused_.bytes(), stream), "cudaMemsetAsync");
  return true;
}

HostKVSlots::Totals HostKVSlots::totals(cudaStream_t stream) const {
  unsigned long long t[2] = {0, 0};
  check(cudaStreamSynchronize(stream), "host KV step");
  check(cudaMemcpy(t, own_.totals.data(), sizeof t, cudaMemcpyDeviceToHost), "cudaMemcpy");
  Totals out{t[0], t[1], 0};
  for (const MapBuffers& m : ahead_)
    if (m.totals.size() > 0) {
      check(cudaMemcpy(t, m.totals.data(), sizeof t, cudaMemcpyDeviceToHost), "cudaMemcpy");
      out.prefetched += t[0];
    }
  return out;
}

}  // namespace skim::cuda
