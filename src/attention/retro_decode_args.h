// Arguments of RetroAttention's decode stages around the paged decode kernel, shared by the
// CUDA kernels and their CPU references (skim::cuda:: and skim::cpu::retro_page_plan /
// retro_merge take the same structs). RetroAttention: seeds/000; attention/retro.h.
//
// A decode step of a sequence runs its newest token (step t) and its last w-1 tokens again
// (past rows, steps u with t-w < u < t), all of them rows of one batch, the newest last. Per
// layer:
//   plan: the newest row attends the base's pages (quest's union with per-head masks, gbsa's
//     group list); each selection unit (a query head for quest, a KV group for gbsa) keeps a
//     retrospective mask A[p], the last step page p was loaded (RetroMask, Algorithm 2): first
//     A[current page] = t-1, then each page the unit selects returns its old value and gets t.
//     A past row of step u attends, per head, the pages its unit selected now whose old value is
//     < u: loaded by no query since its own step. Those are whole pages below the current one
//     (the base always keeps the current page, so it is never unseen), in the newest row's list
//     order, with a per-head mask. In a layer the base keeps dense nothing changes: the newest
//     row attends every page, past rows nothing, A stays.
//   kernel: paged decode attention over every row's list (one call).
//   merge: the newest row's state is its output and goes into the output cache (per sequence,
//     layer and head the last tokens' states, entry step % entries); a past row's cached state
//     merged with its new state is its output and replaces the cached one. With w - 1 entries
//     (the CPU policy's) the newest row overwrites the entry its oldest past row reads, so past
//     rows merge first; with w (a rule's, the GPU's) no entry is both, and one launch merges all.
//
// Per-sequence state lives in slots (a sequence's index, assigned by the caller): for the layer,
// A int32 [slots][units][stride] (units: num_heads with per-head units, else num_kv_heads;
// stride >= a sequence's pages; -1: never loaded), the cache o fp32 [slots][entries][num_heads][head_dim],
// lse [slots][entries][num_heads], step int32 [slots][entries] (entries: w - 1 or w, see merge).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/plan_rows.h"
#include "core/host_device.h"

namespace skim {

inline constexpr int32_t kRetroNever = -1;  // A of a page no step loaded

// One policy's Retro parameters, by policy index (a GPU batch mixing policies): rows of an
// inactive index have no slot and pass through.
struct RetroRowRule {
  int active = 0;
  int window = 2;              // w
  int per_head_units = 1;      // quest: 1; gbsa/resa: 0
  int dense_layers = 0;        // the base's dense layers: nothing unseen there
};

struct RetroMaskView {
  int32_t* a = nullptr;
  int units = 0, stride = 0;
  SKIM_HOST_DEVICE int32_t* of(int slot, int unit) const { return a + (size_t(slot) * units + unit) * stride; }
};

struct RetroCacheView {
  int entries = 0;  // w - 1 or w (see merge above)
  float* o = nullptr;
  float* lse = nullptr;
  int32_t* step = nullptr;
};

// Rows: row_slot [batch] (-1: a row of another policy: its base list passes through whole),
// retro_step [batch], newest_row [batch] (the index of the row's sequence's newest row; a newest
// row names itself). The base plan is per (row, KV head) (or per row with base_per_kv_head false: a
// dense layer's), masks optional. Outputs [batch][num_kv_heads][max_pages_per_seq], lens
// [batch][num_kv_heads], masks always written. age [batch][num_kv_heads][max_pages_per_seq] [group]
// is scratch (an unfolded plan's; a folded one writes none): per listed page and head of a newest
// row, t minus the old A value its selection returned, clamped to [0, 255] (0 for a head that did
// not select the page, or an A from before the step count restarted: seen), so a past row of step u
// attends the page when age > t - u.
struct RetroPagePlanArgs {
  int batch = 0, num_heads = 0, num_kv_heads = 0, page_size = 16, max_pages_per_seq = 0;
  bool per_head_units = true;  // quest: a unit per query head; gbsa: one per KV group
  bool sparse = true;          // the base selects in this layer (false: its dense layers)
  // Optional, together (a batch mixing policies): row b's per_head_units and sparse come from
  // rules[row_policy[b]] at `layer` instead of the two above.
  const RetroRowRule* rules = nullptr;
  const int32_t* row_policy = nullptr;
  int layer = 0;
  // GPU only: an inverse page map of the pool (num_pool_pages ints) in `workspace`;
  // index_ready: it already holds this step's (an earlier layer's call made it: the map depends
  // on the page tables alone).
  int num_pool_pages = 0;
  bool index_ready = false;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  const int32_t *page_table = nullptr, *seq_lens = nullptr;
  bool base_per_kv_head = true;
  const int32_t *base_table = nullptr, *base_lens = nullptr;
  const uint32_t* base_masks = nullptr;
  // base_row [batch] (optional): the base plan's row of each newest row (a plan made for the
  // newest rows alone); null: the base plan has every row of the batch.
  const int32_t* base_row = nullptr;
  const int32_t *row_slot = nullptr, *retro_step = nullptr, *newest_row = nullptr;
  RetroMaskView masks = {};
  uint8_t* age = nullptr;
  int32_t *out_table = nullptr, *out_lens = nullptr;
  uint32_t* out_masks = nullptr;
  // GPU only: the supplements' tokens (past rows' lists) are added to it (device), the
  // newest rows' to listed_tokens (their base's union), both optional.
  unsigned long long *supplement_tokens = nullptr, *listed_tokens = nullptr;
  // GPU only, optional (retro_fold_fits): the step folded. Each past row rides in its newest
  // row's lists as query heads group .. 2 group - 1 of the KV head (its pages are a subset of
  // them): a newest row's masks get the past row's bits above its own (bit group + g: head g of
  // the past row attends the page), a past row's lists are empty (its pages still count in
  // supplement_tokens), and q [batch][num_heads][head_dim] (bf16) is copied to folded_q
  // [batch][2 num_heads][head_dim] in that order (a newest row's heads of KV head h, then its
  // past row's; zeros where it has none). The call reads each page once for both rows, where
  // the unfolded one reads a past row's pages again.
  const uint16_t* q = nullptr;
  uint16_t* folded_q = nullptr;
  int head_dim = 0;

  SKIM_HOST_DEVICE int group_size() const { return num_kv_heads > 0 ? num_heads / num_kv_heads : 0; }
  SKIM_HOST_DEVICE size_t base_list(int b, int h) const {
    const int row = base_row ? base_row[b] : b;
    return base_per_kv_head ? size_t(row) * num_kv_heads + h : size_t(row);
  }
  SKIM_HOST_DEVICE bool per_head_of(int b) const { return rules ? rules[row_policy[b]].per_head_units != 0 : per_head_units; }
  SKIM_HOST_DEVICE bool sparse_of(int b) const { return rules ? layer >= rules[row_policy[b]].dense_layers : sparse; }
  SKIM_HOST_DEVICE int unit_of(int b, int kv_head, int g) const {
    return per_head_of(b) ? kv_head * group_size() + g : kv_head;
  }
  SKIM_HOST_DEVICE bool folded() const { return folded_q != nullptr; }
};

// Whether a step may fold (RetroPagePlanArgs::folded_q): every sequence has at most one past row
// (w <= 2) and a KV head's query heads of both rows fit the decode kernel's one MMA tile.
inline bool retro_fold_fits(int max_window, int group_size) { return max_window <= 2 && 2 * group_size <= 8; }

// Per (row, query head) of the kernel's states (o, lse): the row's output and the cache, as
// above. Rows with row_slot -1 output their state.
struct RetroMergeArgs {
  int batch = 0, num_heads = 0, head_dim = 0;
  const float *o = nullptr, *lse = nullptr;  // the kernel's states [batch][num_heads][head_dim], [batch][num_heads]
  float* out = nullptr;                      // [batch][num_heads][head_dim]
  uint16_t* out_bf16 = nullptr;              // GPU only, optional: out as bf16 here instead
  float* out_lse = nullptr;                  // [batch][num_heads] (optional)
  const int32_t *row_slot = nullptr, *retro_step = nullptr, *newest_row = nullptr;
  // A row's cache has `window` entries of the cache.entries it holds when rules are given (with
  // row_policy: the GPU's), else all of them (the CPU policy's w - 1).
  const RetroRowRule* rules = nullptr;
  const int32_t* row_policy = nullptr;
  RetroCacheView cache;
  // GPU only: o and lse in the folded layout (RetroPagePlanArgs::folded_q) of groups of this
  // many heads, [batch][2 num_heads]; 0: [batch][num_heads].
  int fold_group = 0;
  SKIM_HOST_DEVICE int entries_of(int b) const { return rules ? rules[row_policy[b]].window : cache.entries; }
  // The state (index into lse; o at head_dim times it) of row b's query head h.
  SKIM_HOST_DEVICE size_t state_of(int b, int h, bool past) const {
    if (fold_group == 0) return size_t(b) * num_heads + h;
    const int g = fold_group;
    return size_t(past ? newest_row[b] : b) * 2 * num_heads + size_t(h / g) * 2 * g + (past ? g : 0) + h % g;
  }
  // state_of inverted: the row b and query head h whose state is s; false for a state no row
  // reads (in the folded layout a past row's own states, its lists empty, and the past-row
  // heads of a newest row that has none). Reads row_slot and newest_row.
  SKIM_HOST_DEVICE bool row_of_state(size_t s, int& b, int& h) const {
    const int H = num_heads, g = fold_group;
    if (g == 0) {
      b = int(s / size_t(H)), h = int(s % size_t(H));
      return true;
    }
    const int nb = int(s / size_t(2 * H)), hf = int(s % size_t(2 * H)), j = hf % (2 * g);
    h = hf / (2 * g) * g + j % g;
    const int slot = row_slot ? row_slot[nb] : -1;
    if (slot >= 0 && newest_row[nb] != nb) return false;  // a past row's own states
    if (j < g) {
      b = nb;
      return true;
    }
    b = nb - 1;  // the past row: the row before its newest (retro_fold_fits: at most one)
    return slot >= 0 && b >= 0 && row_slot[b] == slot && newest_row[b] == nb;
  }
};

}  // namespace skim
