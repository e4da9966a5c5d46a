#include "attention/pipeline.h"

#include <algorithm>

#include "attention/selectors.h"
#include "attention/split_attend.h"

namespace skim {

namespace {

// Sorted, adjacent ranges joined: fewer, longer scans. Priority order is not needed once
// the traversal is exhaustive.
std::vector<KeyRange> coalesce(std::vector<KeyRange> r) {
  std::sort(r.begin(), r.end(), [](KeyRange a, KeyRange b) { return a.begin < b.begin; });
  std::vector<KeyRange> out;
  for (KeyRange x : r) {
    if (x.end <= x.begin) continue;
    if (!out.empty() && out.back().end >= x.begin) {
      out.back().end = std::max(out.back().end, x.end);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// Keys in the union of the heads' selections: what a GQA-aware kernel reads once.
uint64_t union_size(const Selection& s) {
  std::vector<KeyRange> all;
  for (auto& h : s.heads) all.insert(all.end(), h.begin(), h.end());
  uint64_t n = 0;
  for (KeyRange r : coalesce(std::move(all))) n += uint64_t(r.end - r.begin);
  return n;
}

}  // namespace

void attend_dense(const AttentionBatch& b, float* out) {
  const int group = b.num_heads / b.num_kv_heads;
  std::vector<AttendTask> tasks;
  for (int r = 0; r < b.num_rows; ++r)
    for (int h = 0; h < b.num_kv_heads; ++h)
      tasks.push_back({r, h, h * group, group, {KeyRange{0, b.positions[r] + 1}}});
  AttentionBatch copy = b;
  copy.out = out;
  attend_tasks(copy, tasks);
}

PipelinePolicy::PipelinePolicy(PipelineConfig config)
    : config_(std::move(config)), dense_(std::make_unique<DenseSelector>()) {}

void PipelinePolicy::attend(const AttentionBatch& b) {
  const int group = b.num_heads / b.num_kv_heads;
  const bool sparse = b.decode && config_.selector && b.layer >= config_.dense_layers;
  Selector& selector = sparse ? *config_.selector : *dense_;
  std::vector<AttendTask> tasks;
  Selection sel;
  uint64_t keys = 0, meta = 0, context = 0;
  for (int r = 0; r < b.num_rows; ++r) {
    const int ctx = b.positions[r] + 1;
    for (int h = 0; h < b.num_kv_heads; ++h) {
      sel.heads.clear();
      sel.metadata_bytes = 0;
      selector.select(SelectInput{b, r, h, ctx}, sel);
      keys += union_size(sel);
      meta += sel.metadata_bytes;
      context += uint64_t(ctx);
      if (sel.shared()) {
        tasks.push_back({r, h, h * group, group, coalesce(sel.heads[0])});
      } else {
        for (int q = 0; q < group; ++q)
          tasks.push_back({r, h, h * group + q, 1, coalesce(sel.heads[size_t(q)])});
      }
    }
  }
  attend_tasks(b, tasks);
  notify(b);
  stats_.keys_read += keys;
  if (b.decode) {
    stats_.decode_calls += 1;
    stats_.decode_keys_read += keys;
    stats_.decode_metadata_bytes += meta;
    stats_.decode_rows += uint64_t(b.num_rows);
    stats_.decode_context += context;
  }
}

}  // namespace skim
