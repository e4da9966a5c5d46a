// attend: the states of the query heads of one GQA group over a set of token ranges of one
// sequence's cache, for one KV head. Each key and value is read once for all query heads of
// the group. This is the core every policy calls on the CPU.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_layer_view.h"

namespace skim {

struct KeyRange {
  int begin = 0, end = 0;  // token positions [begin, end)
};

// The same keys as sorted, disjoint ranges with neighbours joined: fewer, longer scans.
std::vector<KeyRange> coalesce_ranges(std::vector<KeyRange> ranges);

// One KV head of one sequence: where its tokens live.
struct SeqKV {
  KVLayerView layer;
  const int32_t* pages = nullptr;  // the sequence's page table
  int kv_head = 0;

  const float* key(int pos) const {
    return layer.k + layer.offset(pages[pos / layer.page_size], kv_head) +
           size_t(pos % layer.page_size) * layer.head_dim;
  }
  const float* value(int pos) const {
    return layer.v + layer.offset(pages[pos / layer.page_size], kv_head) +
           size_t(pos % layer.page_size) * layer.head_dim;
  }
};

// q: [n_q][head_dim]; o: [n_q][head_dim]; lse: [n_q]. Ranges must be disjoint; an empty set
// yields (0, -inf). `scale` multiplies q.k (1/sqrt(head_dim) for Llama).
void attend(const float* q, int n_q, const SeqKV& kv, std::span<const KeyRange> ranges,
            float scale, float* o, float* lse);

// The plain definition (one key at a time, double accumulation), the oracle for attend.
void attend_reference(const float* q, int n_q, const SeqKV& kv, std::span<const KeyRange> ranges,
                      float scale, float* o, float* lse);

}  // namespace skim
