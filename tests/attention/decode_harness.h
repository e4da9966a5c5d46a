// A one-layer random sequence fed to a policy the way the engine does: a prefill batch of the
// first tokens, then decode steps of one new token each. Queries (pre- and post-RoPE, here
// independent random vectors) are kept per position so tests can recompute any state.
#pragma once

#include <cmath>
#include <vector>

#include "../test_random.h"
#include "backend/cpu/attend.h"
#include "attention/attention_state.h"
#include "attention/policy.h"

namespace skim::test {

struct DecodeHarness {
  int kv_heads, group, d, heads;
  KVCacheShape shape;
  PagedKVCache cache;
  PageTable table;
  std::vector<std::vector<float>> q, q_pre;  // per position: [heads][d]
  std::vector<int32_t> pos;
  std::vector<const PageTable*> tables;
  std::vector<float> out;

  DecodeHarness(int capacity, int kv_heads_, int group_, int d_)
      : kv_heads(kv_heads_), group(group_), d(d_), heads(kv_heads_ * group_),
        shape{1, kv_heads_, d_, 16, capacity / 16 + 2}, cache(shape) {}

  // Appends one token: random K/V and queries (the keys scaled so attention is not uniform).
  void add_token() {
    const int p = table.length;
    cache.reserve(table, p + 1);
    auto k = random_vector(size_t(kv_heads) * d, 1.5f), v = random_vector(size_t(kv_heads) * d);
    cache.write(0, table, p, k.data(), v.data());
    table.length = p + 1;
    q.push_back(random_vector(size_t(heads) * d));
    q_pre.push_back(random_vector(size_t(heads) * d));
  }

  // A batch of positions [first, first+n); its q/q_pre are copied from the per-position store.
  AttentionBatch batch(int first, int n, bool decode) {
    qbuf.clear();
    qpbuf.clear();
    pos.clear();
    for (int i = 0; i < n; ++i) {
      qbuf.insert(qbuf.end(), q[size_t(first + i)].begin(), q[size_t(first + i)].end());
      qpbuf.insert(qpbuf.end(), q_pre[size_t(first + i)].begin(), q_pre[size_t(first + i)].end());
      pos.push_back(first + i);
    }
    out.assign(size_t(n) * heads * d, 0.0f);
    tables.assign(size_t(n), &table);
    AttentionBatch b;
    b.num_rows = n;
    b.num_heads = heads;
    b.num_kv_heads = kv_heads;
    b.head_dim = d;
    b.scale = 1.0f / std::sqrt(float(d));
    b.decode = decode;
    b.kv = cache.layer(0);
    b.positions = pos.data();
    b.tables = tables.data();
    b.q = qbuf.data();
    b.q_pre = qpbuf.data();
    b.out = out.data();
    return b;
  }

  // Prefill `n` tokens through the policy.
  void prefill(AttentionPolicy& policy, int n) {
    for (int i = 0; i < n; ++i) add_token();
    AttentionBatch b = batch(0, n, false);
    policy.attend(b);
  }

  // One decode step (a new token); returns the output [heads][d].
  std::vector<float> step(AttentionPolicy& policy) {
    add_token();
    AttentionBatch b = batch(table.length - 1, 1, true);
    policy.attend(b);
    return out;
  }

  // Dense output of the newest token, for comparison.
  std::vector<float> dense_newest() {
    AttentionBatch b = batch(table.length - 1, 1, true);
    std::vector<float> o(size_t(heads) * d);
    attend_dense(b, o.data());
    return o;
  }

  // Plain definition: state of query `qh` over keys [begin, end) of KV head `kvh`, in double.
  void brute_state(const float* qh, int kvh, int begin, int end, std::vector<double>& o, double& lse) {
    o.assign(size_t(d), 0.0);
    lse = -INFINITY;
    if (end <= begin) return;
    const float scale = 1.0f / std::sqrt(float(d));
    std::vector<double> s;
    double m = -INFINITY;
    for (int t = begin; t < end; ++t) {
      const float* k = cache.key(0, table, t, kvh);
      double x = 0;
      for (int i = 0; i < d; ++i) x += double(qh[i]) * k[i];
      s.push_back(x * scale);
      m = std::max(m, s.back());
    }
    double z = 0;
    for (int t = begin; t < end; ++t) {
      double w = std::exp(s[size_t(t - begin)] - m);
      z += w;
      const float* v = cache.value(0, table, t, kvh);
      for (int i = 0; i < d; ++i) o[size_t(i)] += w * v[i];
    }
    for (double& x : o) x /= z;
    lse = m + std::log(z);
  }

 private:
  std::vector<float> qbuf, qpbuf;
};

inline float max_abs_diff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace skim::test
