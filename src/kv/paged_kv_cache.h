// Paged KV cache: fixed-size pages of `page_size` tokens, shared by all layers (a sequence's
// page i is the same page id in every layer's pool). Layout of one layer's pool, for K and V
// alike: [num_pages][num_kv_heads][page_size][head_dim], so one KV head's page is contiguous
// and is read once for all query heads of its GQA group. Page digests (per page and KV head,
// element-wise min and max of the keys) are kept right on every write, for Quest-style
// selection.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kv/kv_layer_view.h"
#include "kv/page_pool.h"

namespace skim {

constexpr int kDefaultPageSize = 16;

struct KVCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = kDefaultPageSize;
  int num_pages = 0;
};

class PagedKVCache {
 public:
  explicit PagedKVCache(const KVCacheShape& shape);

  const KVCacheShape& shape() const { return shape_; }
  int free_pages() const { return pool_.free_pages(); }

  // Grows `table` so it can hold `new_length` tokens; throws skim::Error when the pool is full.
  void reserve(PageTable& table, int new_length);
  // Returns the table's pages to the pool.
  void release(PageTable& table);
  // Keeps the first `new_length` tokens, a multiple of the page size (PagePool::shrink), and
  // returns the other pages.
  void shrink(PageTable& table, int new_length);

  // Writes K and V of one token (all KV heads, [num_kv_heads][head_dim] each) at `pos`, which
  // must be reserved, and updates the page digests. Overwriting a position recomputes its
  // page's digest from scratch so the digest never keeps a stale extreme.
  void write(int layer, const PageTable& table, int pos, const float* k, const float* v);

  // Copies one page's K, V, digests and fill, in every layer (forking a sequence).
  void copy_page(int32_t from, int32_t to);

  KVLayerView layer(int layer) const;
  const float* key(int layer, const PageTable& table, int pos, int kv_head) const;
  const float* value(int layer, const PageTable& table, int pos, int kv_head) const;

  size_t bytes_per_token() const;  // K+V of all layers

 private:
  void recompute_digest(int layer, int32_t page, int kv_head, int valid_tokens);

  KVCacheShape shape_;
  std::vector<std::vector<float>> k_, v_, kmin_, kmax_;  // per layer
  PagePool pool_;
  // Tokens written in each page of each layer, so a write knows whether it overwrites.
  std::vector<int32_t> page_fill_;  // [num_layers][num_pages]
  int32_t& fill(int layer, int32_t page) { return page_fill_[size_t(layer) * shape_.num_pages + page]; }
};

}  // namespace skim
