// CPU attend over one contiguous range against the same count of scattered single keys (what a
// cs selection hands over), on a cache as large as SmolLM2-135M's at 8K (30 layers, 3 KV heads,
// head_dim 64, GQA 3), so the keys come from memory, not cache. Prints ns per key of each.
// Results: bench/results/2026-11-24-cpu-cs-speed/.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/attend.h"
#include "kv/paged_kv_cache.h"

using namespace skim;

namespace {

double ns_per_key(const PagedKVCache& cache, const PageTable& t, const std::vector<KeyRange>& ranges, const std::vector<float>& q,
                  int layers, int kv_heads, int group, int reps) {
  std::vector<float> o(q.size()), lse(static_cast<size_t>(group));
  int keys = 0;
  for (KeyRange r : ranges) keys += r.end - r.begin;
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < reps; ++it)
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < kv_heads; ++h)
        attend(q.data(), group, SeqKV{cache.layer(l), t.pages.data(), h}, ranges, 0.125f, o.data(), lse.data());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s / reps / layers / kv_heads / keys * 1e9;
}

}  // namespace

int main() {
  const int len = 8192, d = 64, kv_heads = 3, group = 3, layers = 30, window = 64, keep = 2458;
  PagedKVCache cache(KVCacheShape{layers, kv_heads, d, 16, len / 16 + 4});
  PageTable t;
  cache.reserve(t, len);
  t.length = len;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> k(size_t(kv_heads) * d), v(k.size());
  for (int p = 0; p < len; ++p) {
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    for (int l = 0; l < layers; ++l) cache.write(l, t, p, k.data(), v.data());
  }
  std::vector<float> q(size_t(group) * d);
  for (float& x : q) x = 0.3f * normal(rng);
  // keep = 0.3 x 8192 keys: the recent window plus random single keys below it, by position.
  std::vector<int> pos(len - window);
  for (int i = 0; i < len - window; ++i) pos[size_t(i)] = i;
  std::shuffle(pos.begin(), pos.end(), rng);
  pos.resize(keep - window);
  std::sort(pos.begin(), pos.end());
  std::vector<KeyRange> scattered;
  for (int x : pos) {
    if (!scattered.empty() && scattered.back().end == x) scattered.back().end = x + 1;
    else scattered.push_back({x, x + 1});
  }
  scattered.push_back({len - window, len});
  const std::vector<KeyRange> dense = {{0, len}};
  for (int round = 0; round < 2; ++round)
    std::printf("dense %.1f ns/key (%d keys); scattered %.1f ns/key (%d keys in %zu ranges)\n",
                ns_per_key(cache, t, dense, q, layers, kv_heads, group, 5), len,
                ns_per_key(cache, t, scattered, q, layers, kv_heads, group, 10), keep, scattered.size());
}
