#include "attention/split_attend.h"

#include <omp.h>

#include <algorithm>

#include "attention/attention_state.h"

namespace skim {

namespace {

constexpr int kChunkTokens = 2048;  // below this a chunk is not worth a thread

struct Task {
  int row, kv_head, first, count;  // ranges [first, first+count) of the row's split list
};

// Cuts a row's ranges into pieces of about kChunkTokens keys.
std::vector<KeyRange> split_ranges(const std::vector<KeyRange>& ranges, int pieces_wanted) {
  int total = 0;
  for (auto r : ranges) total += r.end - r.begin;
  int chunk = std::max(kChunkTokens, (total + pieces_wanted - 1) / std::max(1, pieces_wanted));
  std::vector<KeyRange> out;
  for (auto r : ranges)
    for (int b = r.begin; b < r.end; b += chunk) out.push_back({b, std::min(r.end, b + chunk)});
  return out;
}

}  // namespace

void attend_rows(const AttentionBatch& b, const std::vector<RowRanges>& work) {
  const int d = b.head_dim, group = b.num_heads / b.num_kv_heads;
  const int threads = omp_get_max_threads();
  const int units = b.num_rows * b.num_kv_heads;
  // Split only when there are fewer (row, head) units than threads: decode of few sequences.
  const int pieces = units >= threads ? 1 : (threads + units - 1) / units;

  std::vector<std::vector<KeyRange>> split(size_t(b.num_rows));
  std::vector<Task> tasks;
  for (int r = 0; r < b.num_rows; ++r) {
    split[r] = pieces > 1 ? split_ranges(work[r].ranges, pieces) : work[r].ranges;
    int n = int(split[r].size());
    int per = pieces > 1 ? 1 : std::max(1, n);
    for (int h = 0; h < b.num_kv_heads; ++h)
      for (int f = 0; f < std::max(1, n); f += per) tasks.push_back({r, h, f, std::min(per, n - f)});
  }

  // Each task writes its partial state; tasks of one (row, head) are merged afterwards.
  std::vector<float> part_o(tasks.size() * size_t(group) * d);
  std::vector<float> part_lse(tasks.size() * size_t(group));
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    SeqKV kv{b.kv, b.tables[t.row]->pages.data(), t.kv_head};
    const float* q = b.q + (size_t(t.row) * b.num_heads + size_t(t.kv_head) * group) * d;
    std::span<const KeyRange> ranges(split[t.row].data() + t.first, size_t(std::max(0, t.count)));
    attend(q, group, kv, ranges, b.scale, part_o.data() + i * group * d, part_lse.data() + i * group);
  }

  for (size_t i = 0; i < tasks.size();) {
    const Task& t = tasks[i];
    float* o = b.out + (size_t(t.row) * b.num_heads + size_t(t.kv_head) * group) * d;
    std::vector<float> lse(part_lse.begin() + i * group, part_lse.begin() + (i + 1) * group);
    std::copy_n(part_o.data() + i * group * d, size_t(group) * d, o);
    size_t j = i + 1;
    for (; j < tasks.size() && tasks[j].row == t.row && tasks[j].kv_head == t.kv_head; ++j)
      for (int h = 0; h < group; ++h)
        merge_state(o + size_t(h) * d, lse[h], part_o.data() + (j * group + h) * d,
                    part_lse[j * group + h], d);
    i = j;
  }
}

}  // namespace skim
