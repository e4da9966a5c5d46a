#include "kv/paged_kv_cache.h"

#include <algorithm>
#include <limits>

namespace skim {

PagedKVCache::PagedKVCache(const KVCacheShape& s) : shape_(s), pool_(s.num_pages, s.page_size) {
  SKIM_REQUIRE(s.num_layers > 0 && s.num_kv_heads > 0 && s.head_dim > 0 && s.page_size > 0 &&
                   s.num_pages > 0,
               "KV cache: invalid shape (layers {}, kv heads {}, head_dim {}, page {}, pages {})",
               s.num_layers, s.num_kv_heads, s.head_dim, s.page_size, s.num_pages);
  size_t kv = size_t(s.num_pages) * s.num_kv_heads * s.page_size * s.head_dim;
  size_t dg = size_t(s.num_pages) * s.num_kv_heads * s.head_dim;
  for (int l = 0; l < s.num_layers; ++l) {
    k_.emplace_back(kv, 0.0f);
    v_.emplace_back(kv, 0.0f);
    kmin_.emplace_back(dg, std::numeric_limits<float>::infinity());
    kmax_.emplace_back(dg, -std::numeric_limits<float>::infinity());
  }
  page_fill_.assign(size_t(s.num_layers) * s.num_pages, 0);
}

void PagedKVCache::reserve(PageTable& table, int new_length) {
  for (int32_t p : pool_.reserve(table, new_length))
    for (int l = 0; l < shape_.num_layers; ++l) {
      fill(l, p) = 0;
      for (int h = 0; h < shape_.num_kv_heads; ++h) recompute_digest(l, p, h, 0);
    }
}

void PagedKVCache::release(PageTable& table) { pool_.release(table); }

void PagedKVCache::shrink(PageTable& table, int new_length) { pool_.shrink(table, new_length); }

void PagedKVCache::write(int layer, const PageTable& table, int pos, const float* k, const float* v) {
  const int ps = shape_.page_size, d = shape_.head_dim;
  int32_t page = table.pages.at(size_t(pos / ps));
  int slot = pos % ps;
  bool overwrite = slot < fill(layer, page);
  KVLayerView view = this->layer(layer);
  for (int h = 0; h < shape_.num_kv_heads; ++h) {
    size_t at = view.offset(page, h) + size_t(slot) * d;
    std::copy_n(k + size_t(h) * d, d, k_[layer].data() + at);
    std::copy_n(v + size_t(h) * d, d, v_[layer].data() + at);
    if (overwrite) {
      recompute_digest(layer, page, h, fill(layer, page));
    } else {
      float* mn = kmin_[layer].data() + (size_t(page) * shape_.num_kv_heads + h) * d;
      float* mx = kmax_[layer].data() + (size_t(page) * shape_.num_kv_heads + h) * d;
      const float* kh = k + size_t(h) * d;
      for (int i = 0; i < d; ++i) {
        mn[i] = std::min(mn[i], kh[i]);
        mx[i] = std::max(mx[i], kh[i]);
      }
    }
  }
  if (!overwrite) fill(layer, page) = slot + 1;
}

void PagedKVCache::recompute_digest(int layer, int32_t page, int kv_head, int valid_tokens) {
  const int d = shape_.head_dim;
  float* mn = kmin_[layer].data() + (size_t(page) * shape_.num_kv_heads + kv_head) * d;
  float* mx = kmax_[layer].data() + (size_t(page) * shape_.num_kv_heads + kv_head) * d;
  std::fill_n(mn, d, std::numeric_limits<float>::infinity());
  std::fill_n(mx, d, -std::numeric_limits<float>::infinity());
  const float* base = k_[layer].data() + this->layer(layer).offset(page, kv_head);
  for (int t = 0; t < valid_tokens; ++t)
    for (int i = 0; i < d; ++i) {
      mn[i] = std::min(mn[i], base[size_t(t) * d + i]);
      mx[i] = std::max(mx[i], base[size_t(t) * d + i]);
    }
}

void PagedKVCache::copy_page(int32_t from, int32_t to) {
  const size_t kv = size_t(shape_.num_kv_heads) * shape_.page_size * shape_.head_dim;
  const size_t dg = size_t(shape_.num_kv_heads) * shape_.head_dim;
  for (int l = 0; l < shape_.num_layers; ++l) {
    std::copy_n(k_[l].data() + from * kv, kv, k_[l].data() + to * kv);
    std::copy_n(v_[l].data() + from * kv, kv, v_[l].data() + to * kv);
    std::copy_n(kmin_[l].data() + from * dg, dg, kmin_[l].data() + to * dg);
    std::copy_n(kmax_[l].data() + from * dg, dg, kmax_[l].data() + to * dg);
    fill(l, to) = fill(l, from);
  }
}

KVLayerView PagedKVCache::layer(int l) const {
  return KVLayerView{k_[l].data(),       v_[l].data(),        kmin_[l].data(), kmax_[l].data(),
                     shape_.num_kv_heads, shape_.head_dim, shape_.page_size};
}

const float* PagedKVCache::key(int l, const PageTable& t, int pos, int h) const {
  KVLayerView v = layer(l);
  return v.k + v.offset(t.pages.at(size_t(pos / v.page_size)), h) + size_t(pos % v.page_size) * v.head_dim;
}

const float* PagedKVCache::value(int l, const PageTable& t, int pos, int h) const {
  KVLayerView v = layer(l);
  return v.v + v.offset(t.pages.at(size_t(pos / v.page_size)), h) + size_t(pos % v.page_size) * v.head_dim;
}

size_t PagedKVCache::bytes_per_token() const {
  return size_t(2) * shape_.num_layers * shape_.num_kv_heads * shape_.head_dim * sizeof(float);
}

}  // namespace skim
