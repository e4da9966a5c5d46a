// Arguments of the page cache of KV beyond GPU memory (issue 18), shared by the CPU reference
// (skim::cpu::page_cache_map, backend/cpu/page_cache_map.h) and a device kernel taking the same
// struct. No CUDA types here.
//
// A layer's KV pages live in (pinned) host memory, `num_host_pages` of them; a pool of `slots`
// device pages holds the ones read lately. Before a layer's decode attention, the plan's page
// lists (host page ids, attention/page_plan.h's layout) are mapped onto the cache:
//   1. every page in `written` (written since it was copied: the newest page of each row, a
//      rectified or Retro-corrected page) leaves the cache, its slot freed: no stale read;
//   2. a listed page already resident is a hit: its slot is stamped with `step`;
//   3. the missing pages, in ascending page id, take the slots of least `last_used` that this
//      step did not stamp (free slots, last_used -1, first; ties to the lower slot), in
//      ascending slot order, each evicting the page it held; each is listed as a copy
//      (host page -> slot) for the caller's copy kernel, and stamped;
//   4. the lists are rewritten with slot ids (slot_table), the table the decode kernel reads
//      from the slot pool.
// A map made ahead (`prefetch`: the next layer's pages guessed while this layer runs, issue 18's
// overlap) differs in four ways: it stamps as the step before (step - 1), so the step's own map
// may still evict what it brought; its misses take only slots older than that (never one the
// step before used, nor one it stamped), the first in ascending page id as many as there are
// such slots (the rest are not copied); it writes no slot table; and a refusal sets no flag.
// A step whose distinct listed pages exceed the slots cannot run: the map refuses it and
// changes nothing (the caller sizes the cache, e.g. 2x a step's pages, which hit 93-99.8% on
// SmolLM2 at 8K: bench/results/2026-11-26-cpu-selection-locality/).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace skim {

struct PageCacheArgs {
  // The plan: [lists][max_pages] host page ids; list i's first list_pages[i] entries are used.
  int lists = 0, max_pages = 0;
  const int32_t* table = nullptr;
  const int32_t* list_pages = nullptr;
  int32_t* slot_table = nullptr;  // out, [lists][max_pages]: the used entries as slots (not with prefetch)
  // Or a plan as the decode kernel reads it: list i at table + i * list_stride (0: max_pages)
  // and at slot_table + i * slot_stride (0: list_stride; one KV head's lists of a per-(row, KV
  // head) plan: stride kv x max_pages; a per-row plan mapped for one KV head: max_pages in,
  // kv x max_pages out), and without list_pages its pages ceil(list_lens[i * lens_stride] /
  // page_size) (the plan's lengths in tokens).
  int list_stride = 0, slot_stride = 0;
  const int32_t* list_lens = nullptr;
  int lens_stride = 1, page_size = 16;

  // The cache, state kept across steps (all -1 when empty).
  int slots = 0, num_host_pages = 0;
  int32_t* slot_of_page = nullptr;  // [num_host_pages] its slot, or -1
  int32_t* page_in_slot = nullptr;  // [slots] the host page it holds, or -1
  int64_t* last_used = nullptr;     // [slots] the step that last listed it, -1: free
  int64_t step = 0;                 // larger than every earlier call's
  // GPU only: the step read on the device instead (a counter the decode step's CUDA graph
  // advances: a graph replays its arguments as they were captured).
  const int64_t* step_counter = nullptr;
  bool prefetch = false;  // a map made ahead of the step's own (above)

  const int32_t* written = nullptr;  // [num_written] pages to drop before mapping
  int num_written = 0;

  // Out: the copies to make, host page -> slot, in ascending slot order; and the counts.
  int32_t* copy_page = nullptr;  // [slots]
  int32_t* copy_slot = nullptr;  // [slots]
  int32_t* counts = nullptr;     // [3]: copies, hits (distinct listed pages resident), refused (0/1)
  // GPU only, optional: set to 1 when the map refuses (a flag the host reads after the step),
  // and copies and hits added up over calls ([2]).
  int32_t* refused_flag = nullptr;
  unsigned long long* totals = nullptr;

  SKIM_HOST_DEVICE size_t list_at(int i) const { return size_t(i) * size_t(list_stride > 0 ? list_stride : max_pages); }
  SKIM_HOST_DEVICE size_t slot_at(int i) const { return slot_stride > 0 ? size_t(i) * size_t(slot_stride) : list_at(i); }
  SKIM_HOST_DEVICE int pages_in(int i) const {
    return list_pages ? list_pages[i] : (list_lens[size_t(i) * lens_stride] + page_size - 1) / page_size;
  }
};

}  // namespace skim
