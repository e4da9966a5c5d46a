// Causal attention of a run of consecutive rows of one sequence (a prefill chunk) for the
// query heads of one KV head: flash attention on the CPU. Query tiles and key tiles are
// multiplied as small matrices in registers, so prefill runs at arithmetic speed rather than
// one dot product at a time. The result equals `attend` over [0, position + 1) for each row.
//
// MAC's ring rows also need each row's state over a prefix of its keys,
// [0, mac_prefix_end(position, band, page_size)) (mac.h). The prefix ends inside one key tile of the row: there the running state (the keys
// before the tile) is merged with the tile's keys below the prefix end into a copy, so the
// prefix costs no extra key reads and the row's own output keeps its bits.
#pragma once

#include "backend/cpu/attend.h"

namespace skim {

struct CausalRun {
  const float* q = nullptr;  // row r, head g at q + r * row_stride + g * head_dim
  float* out = nullptr;      // same layout as q
  int row_stride = 0;
  int rows = 0;         // consecutive positions first_pos .. first_pos + rows - 1
  int group = 0;        // query heads of this KV head
  int first_pos = 0;
  // Optional prefix states: row r, head g at prefix_o + r * row_stride + g * head_dim and
  // prefix_lse[r * lse_stride + g]; null: none.
  int prefix_band = 0;
  int prefix_page = 1;  // prefixes end on multiples of this (MAC: the cache's page size)
  float* prefix_o = nullptr;
  float* prefix_lse = nullptr;
  int lse_stride = 0;
};

void attend_causal(const CausalRun& run, const SeqKV& kv, float scale);

}  // namespace skim
