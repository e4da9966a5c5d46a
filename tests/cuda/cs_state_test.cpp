// cuda::CsState, CSAttention's per-sequence state in the GPU forward, against the CPU kernels
// over the same tables: two sequences' prompts sampled chunk by chunk (every stride-th (query,
// head) vector, the sample halved and the stride doubled as chunks would overflow it), their
// tables built (each list at most its sequence's capacity, at one stride), then one decode step
// of both: the new keys inserted as cpu::cs_insert inserts them into a copy of the tables, the
// searches picking what cpu::cs_select picks from the group-mean queries, and the token plans
// the picks then the window; then a prompt appended after decoding began inserts its rows' keys in order, as the
// CPU's inserts do. A dense layer (cs:dense_layers) holds no tables. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "../test_random.h"
#include "attention/csattn.h"
#include "backend/cpu/cs_kernels.h"
#include "backend/cuda/cs_state.h"
#include "core/dtype.h"
#include "device_vectors.h"
#include "paged_decode_parity.h"

namespace skim {
namespace {

using test::to_device;
using test::to_host;

template <class T>
std::vector<T> download(const T* p, size_t n) {
  std::vector<T> v(n);
  cuda::check(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return v;
}

TEST(CudaCsState, DecodeStepEqualsTheCpuKernelsOverItsTables) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const int layers = 3, H = 8, kv = 2, group = H / kv, d = 64, ps = 16, max_context = 512;
  CsParams p;
  p.subspaces = 4;
  p.centroids = 8;
  p.iters = 3;
  p.list = 0.2;
  p.keep = 0.3;
  p.window = 16;
  p.max_points = 100;  // room for 200: both prompts halve their samples (600 and 1204 vectors)
  p.dense_layers = 1;
  const cuda::CsStateShape shape{.num_layers = layers, .num_heads = H, .num_kv_heads = kv, .head_dim = d,
                                 .page_size = ps, .max_rows = 3, .max_context = max_context};
  cuda::CsState cs(shape, p);
  const int prompts[] = {150, 301}, pages_per_seq = max_context / ps, num_pages = 2 * pages_per_seq;
  // Each layer's paged pool, random bf16 keys everywhere (the decode rows' new keys included).
  std::vector<std::vector<uint16_t>> pools;
  std::vector<cuda::DeviceBuffer<uint16_t>> dpools;
  std::vector<const uint16_t*> k_pools;
  for (int l = 0; l < layers; ++l) {
    std::vector<uint16_t> pool(size_t(num_pages) * kv * ps * d);
    for (uint16_t& x : pool) x = f32_to_bf16(test::random_vector(1)[0]);
    pools.push_back(pool);
    dpools.push_back(to_device(pool));
    k_pools.push_back(dpools.back().data());
  }
  std::vector<std::vector<int32_t>> pages(2);
  std::vector<int32_t> all_pages(static_cast<size_t>(num_pages));
  std::iota(all_pages.begin(), all_pages.end(), 0);
  std::shuffle(all_pages.begin(), all_pages.end(), test::rng());
  for (int s = 0; s < 2; ++s) pages[size_t(s)].assign(all_pages.begin() + s * pages_per_seq,
                                                      all_pages.begin() + (s + 1) * pages_per_seq);
  PageTable tables[2];
  cudaStream_t stream = nullptr;
  int slot[2];
  // Prefill: each prompt in two chunks, every layer's queries offered; the host keeps them too.
  std::vector<std::vector<uint16_t>> prompt_q(2);  // [layer][pos][H][d] per sequence
  for (int s = 0; s < 2; ++s) {
    bool moved = false;
    slot[s] = cs.slot_for(&tables[s], 0, moved, stream);
    prompt_q[size_t(s)].resize(size_t(layers) * prompts[s] * H * d);
    for (uint16_t& x : prompt_q[size_t(s)]) x = f32_to_bf16(test::random_vector(1)[0]);
    for (int begin = 0; begin < prompts[s];) {
      const int n = std::min(prompts[s] - begin, 97);
      std::vector<int32_t> positions(static_cast<size_t>(n));
      std::iota(positions.begin(), positions.end(), begin);
      auto dpos = to_device(positions);
      cs.begin_chunk(slot[s], begin, n, stream);
      for (int l = 0; l < layers; ++l) {
        auto dq = to_device(std::vector<uint16_t>(prompt_q[size_t(s)].begin() + long((size_t(l) * prompts[s] + begin) * H * d),
                                                  prompt_q[size_t(s)].begin() + long((size_t(l) * prompts[s] + begin + n) * H * d)));
        cs.prefill_layer(slot[s], l, n, {.q = dq.data(), .positions = dpos.data()}, stream);
      }
      cuda::check(cudaDeviceSynchronize(), "cs_sample_queries");
      begin += n;
    }
    cs.build(slot[s], prompts[s], k_pools, pages[size_t(s)], stream);
  }
  const cuda::CsUnitLayout t = cs.layout();
  const int lists = p.subspaces * p.centroids, S = cs.list_stride(), ds = d / p.subspaces;
  // The samples: every stride-th vector, the stride doubled while the kept ones overflow 2 x
  // points after a chunk; every list holds min(capacity, prompt) entries.
  for (int s = 0; s < 2; ++s)
    for (int l = 1; l < layers; ++l)
      for (int h = 0; h < kv; ++h) {
        const size_t u = t.unit(slot[s], cs.indexed_layer(l), h);
        int vectors = 0, stride = 1;
        for (int begin = 0; begin < prompts[s]; begin += 97) {
          vectors += std::min(97, prompts[s] - begin) * group;
          while ((vectors + stride - 1) / stride > 2 * p.max_points) stride *= 2;
        }
        ASSERT_GT(stride, 1) << "the case halves its samples";
        const int n = (vectors + stride - 1) / stride;
        const std::vector<float> got = download(t.samples + u * size_t(t.sample_capacity) * d, size_t(n) * d);
        for (int i = 0; i < n; ++i) {
          const int v = i * stride, pos = v / group, g = v % group;
          for (int j = 0; j < d; ++j)
            ASSERT_EQ(got[size_t(i) * d + j],
                      bf16_to_f32(prompt_q[size_t(s)][((size_t(l) * prompts[s] + pos) * H + h * group + g) * d + j]))
                << "sample " << i << " of sequence " << s << ", layer " << l << ", head " << h;
        }
        const std::vector<int32_t> sizes = download(t.list_size + u * lists, size_t(lists));
        for (int x : sizes) ASSERT_EQ(x, std::min(cs.capacity(slot[s]), prompts[s]));
      }

  // One decode step of both sequences at their next positions, each layer from the first indexed one.
  const int n = 2;
  std::vector<int32_t> positions = {prompts[0], prompts[1]}, row_slot = {slot[0], slot[1]};
  std::vector<int32_t> page_table(size_t(n) * pages_per_seq);
  for (int s = 0; s < n; ++s) std::copy(pages[size_t(s)].begin(), pages[size_t(s)].end(), page_table.begin() + s * pages_per_seq);
  auto dpos = to_device(positions), dslot = to_device(row_slot), dtable = to_device(page_table);
  for (int l = 1; l < layers; ++l) {
    SCOPED_TRACE(testing::Message() << "layer " << l);
    std::vector<uint16_t> q(size_t(n) * H * d);
    for (uint16_t& x : q) x = f32_to_bf16(test::random_vector(1)[0]);
    auto dq = to_device(q);
    // The CPU's copy of the tables before the step.
    struct Host {
      std::vector<float> centroids, tail;
      std::vector<int32_t> index, size;
      std::vector<uint16_t> score;
    };
    std::vector<Host> host;
    for (int r = 0; r < n; ++r)
      for (int h = 0; h < kv; ++h) {
        const CsTablesView v = t.view(t.unit(slot[r], cs.indexed_layer(l), h));
        host.push_back({download(v.centroids, size_t(lists) * ds), download(v.tail, size_t(lists)),
                        download(v.list_index, size_t(lists) * S), download(v.list_size, size_t(lists)),
                        download(v.list_score, size_t(lists) * S)});
      }
    cs.decode_layer(l, n, {.q = dq.data(), .k_pool = k_pools[size_t(l)], .positions = dpos.data(),
                           .page_table = dtable.data(), .max_pages_per_seq = pages_per_seq, .row_slot = dslot.data()},
                    stream);
    cuda::check(cudaDeviceSynchronize(), "decode_layer");
    const std::vector<int32_t> lens = download(cs.token_lens(), size_t(n) * kv);
    const std::vector<int32_t> plans = download(cs.token_lists(), size_t(n) * kv * max_context);
    cpu::CsSelectScratch scratch;
    for (int r = 0; r < n; ++r)
      for (int h = 0; h < kv; ++h) {
        SCOPED_TRACE(testing::Message() << "row " << r << ", KV head " << h);
        const int sidx = r * kv + h, pos = positions[size_t(r)], ctx = pos + 1;
        Host& c = host[size_t(sidx)];
        std::vector<float> key(static_cast<size_t>(d)), pooled(size_t(d), 0.0f);
        const size_t row = (size_t(pages[size_t(r)][size_t(pos / ps)]) * kv + h) * ps + pos % ps;
        for (int j = 0; j < d; ++j) key[size_t(j)] = bf16_to_f32(pools[size_t(l)][row * d + j]);
        for (int g = 0; g < group; ++g)
          for (int j = 0; j < d; ++j)
            pooled[size_t(j)] += bf16_to_f32(q[((size_t(r) * H) + h * group + g) * d + j]) / float(group);
        cpu::cs_insert({.head_dim = d, .subspaces = p.subspaces, .centroids = p.centroids,
                        .list_capacity = cs.capacity(slot[r]), .list_stride = S, .score_dot = p.score_dot,
                        .centroids_data = c.centroids.data(), .list_index = c.index.data(), .list_score = c.score.data(),
                        .list_size = c.size.data(), .key = key.data(), .position = pos});
        const CsTablesView v = t.view(t.unit(slot[r], cs.indexed_layer(l), h));
        EXPECT_EQ(download(v.list_size, size_t(lists)), c.size) << "the insert";
        EXPECT_EQ(download(v.list_index, size_t(lists) * S), c.index) << "the insert";
        const int wb = std::max(0, ctx - p.window), K = std::min(ctx, std::max(1, int(std::ceil(p.keep * ctx))));
        const int32_t context = ctx, window_begin = wb, n_pick = std::max(0, K - (ctx - wb));
        const CsTablesView hv{c.centroids.data(), c.index.data(), c.score.data(), c.size.data(), c.tail.data()};
        std::vector<int32_t> want(static_cast<size_t>(max_context), -1);
        int32_t count = -1;
        cpu::cs_select({.searches = 1, .head_dim = d, .subspaces = p.subspaces, .centroids = p.centroids,
                        .list_capacity = S, .score_dot = p.score_dot, .missing_mean = p.missing_mean,
                        .by_score = false, .backoff = p.backoff, .backoff_top = p.backoff_top, .queries = pooled.data(),
                        .tables = &hv, .context = &context, .window_begin = &window_begin, .n_pick = &n_pick,
                        .max_picks = max_context, .picks = want.data(), .pick_counts = &count},
                       scratch);
        for (int j = wb; j < ctx; ++j) want[size_t(count + j - wb)] = j;  // the window after the picks
        ASSERT_EQ(lens[size_t(sidx)], count + ctx - wb);
        const std::vector<int32_t> got(plans.begin() + long(sidx) * max_context,
                                       plans.begin() + long(sidx) * max_context + lens[size_t(sidx)]);
        EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + lens[size_t(sidx)]));
      }
  }

  // A prompt appended to sequence 0 after decoding began (a chunk of 5 rows after its decode
  // row): each row's key is inserted in position order, as the CPU's observe inserts them.
  const int first = prompts[0] + 1, rows = 5;
  std::vector<int32_t> chunk_pos(static_cast<size_t>(rows)), chunk_slot(size_t(rows), slot[0]);
  std::iota(chunk_pos.begin(), chunk_pos.end(), first);
  std::vector<int32_t> chunk_table;
  for (int r = 0; r < rows; ++r) chunk_table.insert(chunk_table.end(), pages[0].begin(), pages[0].end());
  auto dcpos = to_device(chunk_pos), dcslot = to_device(chunk_slot), dctable = to_device(chunk_table);
  std::vector<uint16_t> cq(size_t(rows) * H * d);
  for (uint16_t& x : cq) x = f32_to_bf16(test::random_vector(1)[0]);
  auto dcq = to_device(cq);
  cs.begin_chunk(slot[0], first, rows, stream);
  for (int l = 1; l < layers; ++l) {
    SCOPED_TRACE(testing::Message() << "appended chunk, layer " << l);
    std::vector<std::vector<int32_t>> index(kv), size(kv);
    std::vector<std::vector<uint16_t>> score(kv);
    std::vector<std::vector<float>> cent(kv);
    for (int h = 0; h < kv; ++h) {
      const CsTablesView v = t.view(t.unit(slot[0], cs.indexed_layer(l), h));
      index[size_t(h)] = download(v.list_index, size_t(lists) * S);
      score[size_t(h)] = download(v.list_score, size_t(lists) * S);
      size[size_t(h)] = download(v.list_size, size_t(lists));
      cent[size_t(h)] = download(v.centroids, size_t(lists) * ds);
    }
    cs.prefill_layer(slot[0], l, rows,
                     {.q = dcq.data(), .k_pool = k_pools[size_t(l)], .positions = dcpos.data(), .page_table = dctable.data(),
                      .max_pages_per_seq = pages_per_seq, .row_slot = dcslot.data()},
                     stream);
    cuda::check(cudaDeviceSynchronize(), "prefill_layer (inserts)");
    for (int h = 0; h < kv; ++h) {
      for (int r = 0; r < rows; ++r) {
        const int pos = first + r;
        const size_t row = (size_t(pages[0][size_t(pos / ps)]) * kv + h) * ps + pos % ps;
        std::vector<float> key(static_cast<size_t>(d));
        for (int j = 0; j < d; ++j) key[size_t(j)] = bf16_to_f32(pools[size_t(l)][row * d + j]);
        cpu::cs_insert({.head_dim = d, .subspaces = p.subspaces, .centroids = p.centroids,
                        .list_capacity = cs.capacity(slot[0]), .list_stride = S, .score_dot = p.score_dot,
                        .centroids_data = cent[size_t(h)].data(), .list_index = index[size_t(h)].data(),
                        .list_score = score[size_t(h)].data(), .list_size = size[size_t(h)].data(), .key = key.data(),
                        .position = pos});
      }
      const CsTablesView v = t.view(t.unit(slot[0], cs.indexed_layer(l), h));
      EXPECT_EQ(download(v.list_size, size_t(lists)), size[size_t(h)]) << "head " << h;
      EXPECT_EQ(download(v.list_index, size_t(lists) * S), index[size_t(h)]) << "head " << h;
    }
  }
}

}  // namespace
}  // namespace skim
