#include "attention/split_attend.h"

#include <omp.h>

#include <algorithm>

#include "attention/attention_state.h"

namespace skim {

namespace {

constexpr int kMinChunkTokens = 1024;  // below this a chunk is not worth a thread

struct Piece {
  size_t task;
  std::vector<KeyRange> ranges;
};

// Cuts a task's ranges into about `pieces` parts of at least kMinChunkTokens keys.
void cut(size_t task, const std::vector<KeyRange>& ranges, int pieces, std::vector<Piece>& out) {
  int total = 0;
  for (auto r : ranges) total += r.end - r.begin;
  int chunk = std::max(kMinChunkTokens, (total + pieces - 1) / std::max(1, pieces));
  Piece cur{task, {}};
  int filled = 0;
  for (KeyRange r : ranges) {
    while (r.begin < r.end) {
      int take = std::min(r.end - r.begin, chunk - filled);
      cur.ranges.push_back({r.begin, r.begin + take});
      r.begin += take;
      filled += take;
      if (filled == chunk) {
        out.push_back(std::move(cur));
        cur = Piece{task, {}};
        filled = 0;
      }
    }
  }
  if (!cur.ranges.empty() || out.empty() || out.back().task != task) out.push_back(std::move(cur));
}

}  // namespace

void attend_tasks(const AttentionBatch& b, const std::vector<AttendTask>& tasks, float* lse_out) {
  const int d = b.head_dim, group = b.num_heads / b.num_kv_heads;
  const int threads = omp_get_max_threads();
  const int per_task = tasks.size() >= size_t(threads) ? 1 : int((threads + tasks.size() - 1) / tasks.size());

  std::vector<Piece> pieces;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (per_task > 1) {
      cut(i, tasks[i].ranges, per_task, pieces);
    } else {
      pieces.push_back({i, tasks[i].ranges});
    }
  }

  // Each piece writes a partial state; the pieces of a task are merged in order afterwards.
  std::vector<float> part_o(pieces.size() * size_t(group) * d);
  std::vector<float> part_lse(pieces.size() * size_t(group));
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < pieces.size(); ++i) {
    const AttendTask& t = tasks[pieces[i].task];
    SeqKV kv{b.kv, b.tables[t.row]->pages.data(), t.kv_head};
    const float* q = b.q + (size_t(t.row) * b.num_heads + t.q_first) * d;
    attend(q, t.q_count, kv, pieces[i].ranges, b.scale, part_o.data() + i * group * d,
           part_lse.data() + i * group);
  }

  std::vector<float> lse(static_cast<size_t>(group));
  for (size_t i = 0; i < pieces.size();) {
    const AttendTask& t = tasks[pieces[i].task];
    float* o = b.out + (size_t(t.row) * b.num_heads + t.q_first) * d;
    std::copy_n(part_o.data() + i * group * d, size_t(t.q_count) * d, o);
    std::copy_n(part_lse.data() + i * group, t.q_count, lse.data());
    size_t j = i + 1;
    for (; j < pieces.size() && pieces[j].task == pieces[i].task; ++j)
      for (int h = 0; h < t.q_count; ++h)
        merge_state(o + size_t(h) * d, lse[size_t(h)], part_o.data() + (j * group + h) * d,
                    part_lse[j * group + h], d);
    if (lse_out) std::copy_n(lse.data(), t.q_count, lse_out + size_t(t.row) * b.num_heads + t.q_first);
    i = j;
  }
}

}  // namespace skim
