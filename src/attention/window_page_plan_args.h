// Arguments of the window page plan, shared by the CUDA kernel and its CPU reference
// (skim::cuda::window_page_plan and skim::cpu::window_page_plan take the same struct).
//
// Sinks plus a recent window, in whole pages (StreamingLLM's choice, the policy `streaming`),
// and with no window every key (`dense`): for a row of `len` tokens in m pages, the pages
// holding a sink token, [0, ceil(sink / page_size)), and those holding a token of the last
// `window`, [(len - window) / page_size, m), in position order, written for each of the row's
// KV heads in the per-(row, KV head) plan layout selection kernels write
// (group_page_select_args.h), with the tokens they hold, and a mask of ~0u per page (every
// head attends it) when out_masks is set. Whole pages read at most page_size - 1 keys more
// than the token-exact window and sinks at each edge; the plan is then the same on both
// backends and its pages are full but the newest, as the decode kernel wants. A batch that
// mixes policies plans its dense and streaming rows this way beside the other rows'
// selections; with num_kv_heads 1 it is a plan per row. With recent_first the pages come in ART's
// visiting order instead: the newest page (the partial one) first, then the sinks, then the
// window's pages from the newest back (art_decode_args.h).
//
// Layouts: page_table int32 [batch][max_pages_per_seq], seq_lens int32 [batch];
// out_table (and out_masks) [batch][num_kv_heads][max_pages_per_seq], out_lens
// [batch][num_kv_heads]. Rows outside `rows` are not written.
#pragma once

#include <cstdint>

#include "attention/plan_rows.h"
#include "core/host_device.h"

namespace skim {

// The pages a row of `len` tokens keeps: [0, sinks) and [first, m), sinks <= first.
struct WindowPages {
  int m = 0, sinks = 0, first = 0;
  SKIM_HOST_DEVICE int count() const { return sinks + m - first; }
  SKIM_HOST_DEVICE int page(int i) const { return i < sinks ? i : first + (i - sinks); }  // i-th listed
  // The i-th listed in ART's order: the newest, the sinks, the rest of the window newest first.
  SKIM_HOST_DEVICE int page_recent_first(int i) const {
    if (i == 0) return m - 1;
    return i <= sinks ? i - 1 : m - 1 - (i - sinks);
  }
};

SKIM_HOST_DEVICE inline WindowPages window_pages(int len, int page_size, int sink, int window) {
  WindowPages w;
  w.m = (len + page_size - 1) / page_size;
  w.first = window > 0 && len > window ? (len - window) / page_size : 0;
  const int sink_pages = (sink + page_size - 1) / page_size;
  w.sinks = sink_pages < w.first ? sink_pages : w.first;
  return w;
}

struct WindowPagePlanArgs {
  int batch = 0, num_kv_heads = 0, page_size = 16, max_pages_per_seq = 0;
  int sink = 0, window = 0;  // tokens; window 0: every key (dense)
  bool recent_first = false; // ART's visiting order (above)
  const int32_t *page_table = nullptr, *seq_lens = nullptr;
  int32_t* out_table = nullptr;
  uint32_t* out_masks = nullptr;
  int32_t* out_lens = nullptr;
  PlanRows rows{};
};

}  // namespace skim
