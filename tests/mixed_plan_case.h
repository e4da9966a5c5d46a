// A decode batch that mixes policies, for the plan tests (CPU: tests/attention/
// mixed_plan_test.cpp; GPU: tests/cuda/mixed_plan_test.cpp): random bf16 queries and page
// digests over shuffled page tables, each row given policy 0 (dense), 1 (gbsa), 2 (quest) or
// 3 (streaming), and the argument structs of the plan kernels over the whole batch, writing one plan
// (pointers left for the caller to fill: host or device). No gtest here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attention/window_page_plan_args.h"
#include "attention/group_page_select_args.h"
#include "attention/quest_page_select_args.h"
#include "core/dtype.h"
#include "shuffled_pages.h"
#include "test_random.h"

namespace skim::test {

struct MixedPlanCase {
  static constexpr int kDense = 0, kGbsa = 1, kQuest = 2, kStreaming = 3;
  int page_size = 16, head_dim, kv_heads, group;
  std::vector<int> lens, row_policy;
  ShuffledPages pages;
  std::vector<uint16_t> q, kmin, kmax;

  MixedPlanCase(int d, int hkv, int g, std::vector<int> seq_lens)
      : head_dim(d), kv_heads(hkv), group(g), lens(std::move(seq_lens)) {
    pages = shuffled_pages(lens, page_size, 3, 2, rng());
    for (size_t b = 0; b < lens.size(); ++b) row_policy.push_back(random_int(0, 3));
    kmin.resize(size_t(pages.num_pages) * hkv * d);
    kmax.resize(kmin.size());
    const std::vector<float> lo = random_vector(kmin.size()), gap = random_vector(kmin.size());
    for (size_t i = 0; i < kmin.size(); ++i) {
      kmin[i] = f32_to_bf16(lo[i]);
      kmax[i] = f32_to_bf16(lo[i] + std::fabs(gap[i]));
    }
    const std::vector<float> f = random_vector(size_t(batch()) * heads() * d);
    q.resize(f.size());
    std::transform(f.begin(), f.end(), q.begin(), f32_to_bf16);
  }
  int batch() const { return int(lens.size()); }
  int heads() const { return kv_heads * group; }
  size_t slots() const { return size_t(batch()) * kv_heads * pages.stride; }
  size_t lists() const { return size_t(batch()) * kv_heads; }

  WindowPagePlanArgs dense() const {
    return {.batch = batch(), .num_kv_heads = kv_heads, .page_size = page_size, .max_pages_per_seq = pages.stride};
  }
  WindowPagePlanArgs streaming() const {
    WindowPagePlanArgs a = dense();
    a.sink = 4;
    a.window = 700;
    return a;
  }
  GroupPageSelectArgs gbsa() const {
    return {.batch = batch(), .num_heads = heads(), .num_kv_heads = kv_heads, .head_dim = head_dim,
            .page_size = page_size, .max_pages_per_seq = pages.stride, .keep = 0.2, .n_min = 2, .n_local = 1};
  }
  QuestPageSelectArgs quest() const {
    return {.batch = batch(), .num_heads = heads(), .num_kv_heads = kv_heads, .head_dim = head_dim,
            .page_size = page_size, .max_pages_per_seq = pages.stride, .budget = 0.15, .min_tokens = 0};
  }
};

// One policy's rows of a plan (lists, masks, lengths) equal the same kernel's plan of the
// whole batch; the other rows' lists are left to their own policies. Returns the first
// difference, or an empty string.
inline std::string compare_rows(const MixedPlanCase& c, int policy, const std::vector<int32_t>& table,
                                const std::vector<uint32_t>& masks, const std::vector<int32_t>& lens,
                                const std::vector<int32_t>& alone_table, const std::vector<uint32_t>* alone_masks,
                                const std::vector<int32_t>& alone_lens) {
  for (int b = 0; b < c.batch(); ++b) {
    if (c.row_policy[size_t(b)] != policy) continue;
    for (int h = 0; h < c.kv_heads; ++h) {
      const size_t list = size_t(b) * c.kv_heads + h;
      if (lens[list] != alone_lens[list]) return "row " + std::to_string(b) + ": list length";
      for (int i = 0; i < (lens[list] + c.page_size - 1) / c.page_size; ++i) {
        const size_t k = list * c.pages.stride + i;
        if (table[k] != alone_table[k]) return "row " + std::to_string(b) + ": page " + std::to_string(i);
        if (masks[k] != (alone_masks ? (*alone_masks)[k] : ~0u))
          return "row " + std::to_string(b) + ": mask of page " + std::to_string(i);
      }
    }
  }
  return "";
}

}  // namespace skim::test
