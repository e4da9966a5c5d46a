#include "backend/cpu/split_attend.h"

#include <omp.h>

#include <algorithm>
#include <map>

#include "attention/attention_state.h"

namespace skim {

namespace {

constexpr int kMinChunkTokens = 1024;  // below this a chunk is not worth a thread

struct Piece {
  size_t task;
  std::vector<KeyRange> ranges;
};

int count_keys(const std::vector<KeyRange>& ranges) {
  int total = 0;
  for (auto r : ranges) total += r.end - r.begin;
  return total;
}

// Cuts a task's ranges into parts of `chunk` keys (the last one shorter).
void cut(size_t task, const std::vector<KeyRange>& ranges, int chunk, std::vector<Piece>& out) {
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

// Keys of one (row, KV head) that the same entries read, attended once for all of them.
struct SharedPart {
  int row = 0, kv_head = 0;
  const int32_t* pages = nullptr;  // null: the row's table
  std::vector<int> members;  // entry indices
  std::vector<KeyRange> ranges;
};

// Cuts the keys of a (row, KV head)'s entries where the set of entries holding them changes;
// the cuts held by the same set are joined into one part.
void shared_parts(const std::vector<HeadKeys>& entries, const std::vector<int>& group, int kv_head,
                  std::vector<SharedPart>& out) {
  std::vector<int> cuts;
  for (int e : group)
    for (KeyRange r : entries[size_t(e)].ranges) {
      cuts.push_back(r.begin);
      cuts.push_back(r.end);
    }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<size_t> next(group.size(), 0);  // per entry: its first range not wholly before the cut
  std::vector<int> members;
  const size_t first = out.size();
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const KeyRange piece{cuts[c], cuts[c + 1]};  // inside or outside each range, never across
    members.clear();
    for (size_t g = 0; g < group.size(); ++g) {
      const std::vector<KeyRange>& rs = entries[size_t(group[g])].ranges;
      while (next[g] < rs.size() && rs[next[g]].end <= piece.begin) ++next[g];
      if (next[g] < rs.size() && rs[next[g]].begin <= piece.begin) members.push_back(group[g]);
    }
    if (members.empty()) continue;
    auto same = std::find_if(out.begin() + long(first), out.end(), [&](const SharedPart& p) { return p.members == members; });
    if (same == out.end()) {
      const HeadKeys& e0 = entries[size_t(group[0])];
      out.push_back({e0.row, kv_head, e0.pages, members, {piece}});
    } else if (same->ranges.back().end == piece.begin) {
      same->ranges.back().end = piece.end;
    } else {
      same->ranges.push_back(piece);
    }
  }
}

}  // namespace

void attend_shared_keys(const AttendRows& b, const std::vector<HeadKeys>& entries, float* o, float* lse) {
  const int d = b.head_dim, group = b.num_heads / b.num_kv_heads;
  std::map<std::pair<int, int>, std::vector<int>> groups;  // (row, KV head) -> entries
  for (size_t i = 0; i < entries.size(); ++i) groups[{entries[i].row, entries[i].head / group}].push_back(int(i));
  std::vector<SharedPart> parts;
  for (const auto& [key, members] : groups) shared_parts(entries, members, key.second, parts);

  // About two pieces per thread, so that dynamic scheduling evens out parts of unequal length.
  int total = 0;
  for (const SharedPart& p : parts) total += count_keys(p.ranges);
  const int threads = omp_get_max_threads();
  const int chunk = std::max(kMinChunkTokens, (total + 2 * threads - 1) / (2 * threads));
  std::vector<Piece> pieces;
  for (size_t i = 0; i < parts.size(); ++i) cut(i, parts[i].ranges, chunk, pieces);
  std::vector<size_t> at(pieces.size() + 1, 0);  // each piece's first state among all pieces'
  for (size_t i = 0; i < pieces.size(); ++i) at[i + 1] = at[i] + parts[pieces[i].task].members.size();

  std::vector<float> part_o(at.back() * d), part_lse(at.back());
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SharedPart& p = parts[pieces[i].task];
    std::vector<float> q(p.members.size() * d);  // the members' queries side by side
    for (size_t m = 0; m < p.members.size(); ++m) {
      const HeadKeys& e = entries[size_t(p.members[m])];
      std::copy_n(b.q + (size_t(e.row) * b.num_heads + e.head) * d, d, q.data() + m * d);
    }
    SeqKV kv{b.kv, p.pages ? p.pages : b.tables[p.row]->pages.data(), p.kv_head};
    attend(q.data(), int(p.members.size()), kv, pieces[i].ranges, b.scale, part_o.data() + at[i] * d,
           part_lse.data() + at[i]);
  }

  for (size_t e = 0; e < entries.size(); ++e) clear_state(o + e * d, lse[e], d);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SharedPart& p = parts[pieces[i].task];
    for (size_t m = 0; m < p.members.size(); ++m) {
      const size_t e = size_t(p.members[m]);
      merge_state(o + e * d, lse[e], part_o.data() + (at[i] + m) * d, part_lse[at[i] + m], d);
    }
  }
}

void attend_tasks(const AttendRows& b, const std::vector<AttendTask>& tasks, float* lse_out) {
  const int d = b.head_dim, group = b.num_heads / b.num_kv_heads;
  const int threads = omp_get_max_threads();
  const int per_task = tasks.size() >= size_t(threads) ? 1 : int((threads + tasks.size() - 1) / tasks.size());

  std::vector<Piece> pieces;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (per_task > 1) {  // about per_task parts of at least kMinChunkTokens keys
      cut(i, tasks[i].ranges, std::max(kMinChunkTokens, (count_keys(tasks[i].ranges) + per_task - 1) / per_task), pieces);
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
    SeqKV kv{b.kv, t.pages ? t.pages : b.tables[t.row]->pages.data(), t.kv_head};
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
