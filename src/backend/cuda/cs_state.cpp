#include "backend/cuda/cs_state.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cuda/cs_build.cuh"
#include "backend/cuda/cs_insert.cuh"
#include "backend/cuda/cs_select.cuh"
#include "backend/cuda/ops.cuh"
#include "core/error.h"

namespace skim::cuda {

namespace {

// A list's capacity for `tokens` keys: `list` <= 1 a fraction of them, else entries (CsSelector's rule).
int list_capacity(double list, int tokens) {
  return list <= 1.0 ? std::max(1, int(std::ceil(list * tokens))) : int(list);
}

// Grows `buf` to `count` elements keeping its first `keep` (slot-major state: the old slots).
template <class T>
void grow_keeping(DeviceBuffer<T>& buf, size_t count, size_t keep) {
  DeviceBuffer<T> bigger(count);
  if (keep > 0)
    check(cudaMemcpy(bigger.data(), buf.data(), keep * sizeof(T), cudaMemcpyDeviceToDevice), "cudaMemcpy (cs tables)");
  buf = std::move(bigger);
}

}  // namespace

CsState::CsState(const CsStateShape& s, const CsParams& p) : shape_(s), p_(p) {
  SKIM_REQUIRE(s.head_dim % p.subspaces == 0, "policy: cs:subspaces={} does not divide head_dim {}", p.subspaces,
               s.head_dim);
  SKIM_REQUIRE(p.pool_group, "policy: cs:pool=head runs on the CPU only for now (the GPU searches per KV group)");
  SKIM_REQUIRE(!p.recall, "policy: cs:recall=1 runs on the CPU only (a dense scoring pass per search)");
  layers_ = std::max(0, s.num_layers - p.dense_layers);
  stride_ = list_capacity(p.list, s.max_context);
  const size_t searches = size_t(s.max_rows) * s.num_kv_heads, d = size_t(s.head_dim), K = size_t(s.max_context);
  queries_.resize(searches * d);
  keys_.resize(searches * d);
  inserts_.resize(searches);
  views_.resize(searches);
  context_.resize(searches);
  window_begin_.resize(searches);
  n_pick_.resize(searches);
  pick_counts_.resize(searches);
  picks_.resize(searches * K);
  lens_.resize(searches);
  if (p.step > 1) {
    skip_.resize(searches);
    search_units_.resize(searches);
  }
  const CsSelectArgs shapes{.searches = int(searches), .head_dim = s.head_dim, .subspaces = p.subspaces,
                            .centroids = p.centroids, .list_capacity = stride_, .backoff_top = p.backoff_top,
                            .max_picks = s.max_context};
  const size_t ws = cs_select_workspace_size(shapes, s.max_context);
  SKIM_REQUIRE(ws > 0, "policy: cs with {} subspaces x {} centroids (backoff_top {}) does not fit the GPU's search",
               p.subspaces, p.centroids, p.backoff_top);
  select_ws_.resize(ws);
  check(cudaMemset(select_ws_.data(), 0, select_ws_.bytes()), "cudaMemset (cs search)");
  builds_.resize(size_t(s.num_kv_heads) * p.subspaces);
}

CsUnitLayout CsState::layout() const {
  CsUnitLayout t{.layers = layers_, .kv_heads = shape_.num_kv_heads, .head_dim = shape_.head_dim,
                 .subspaces = p_.subspaces, .centroids = p_.centroids, .list_stride = stride_,
                 .sample_capacity = 2 * p_.max_points};
  t.samples = const_cast<float*>(samples_.data());
  t.centroids_data = const_cast<float*>(centroids_.data());
  t.list_index = const_cast<int32_t*>(index_.data());
  t.list_score = const_cast<uint16_t*>(score_.data());
  t.list_size = const_cast<int32_t*>(size_.data());
  t.tail = const_cast<float*>(tail_.data());
  return t;
}

// Every buffer for `slots` slots, the existing slots' tables kept.
void CsState::allocate(int slots) {
  const size_t units = size_t(slots) * layers_ * shape_.num_kv_heads, old = size_t(slots_) * layers_ * shape_.num_kv_heads;
  const size_t lists = size_t(p_.subspaces) * p_.centroids, d = size_t(shape_.head_dim);
  const size_t room = 2 * size_t(p_.max_points);
  grow_keeping(samples_, units * room * d, old * room * d);
  grow_keeping(centroids_, units * p_.centroids * d, old * p_.centroids * d);  // M x C x ds = C x d
  grow_keeping(tail_, units * lists, old * lists);
  grow_keeping(index_, units * lists * stride_, old * lists * stride_);
  grow_keeping(score_, units * lists * stride_, old * lists * stride_);
  grow_keeping(size_, units * lists, old * lists);
  grow_keeping(capacities_, size_t(slots), size_t(slots_));
  if (p_.step > 1) {  // the last search of every unit (a search period)
    const size_t keep = size_t(keep_capacity());
    grow_keeping(last_picks_, units * keep, old * keep);
    grow_keeping(last_count_, units, old);
    grow_keeping(last_window_, units, old);
    grow_keeping(searches_done_, units, old);
  }
  info_.resize(size_t(slots));
  slots_of_.add(slots_, slots);
  slots_ = slots;
}

int CsState::slot_for(const PageTable* t, int policy, bool& moved, cudaStream_t stream) {
  const SequenceSlots::Claim claim = slots_of_.claim_or_grow(t, policy, [&] {
    check(cudaStreamSynchronize(stream), "forward pass");  // buffers move: nothing may use them
    allocate(std::max(2 * slots_, 1));
    moved = true;
  });
  if (claim.fresh) info_[size_t(claim.slot)] = SlotInfo{};  // a new sequence, or another policy: no tables
  return claim.slot;
}

void CsState::fork(const PageTable* from, const PageTable* to, bool& moved, cudaStream_t stream) {
  const int from_policy = slots_of_.policy_of(from);
  if (from_policy < 0) return;
  const int dst = slot_for(to, from_policy, moved, stream), src = slots_of_.slot_of(from);
  const size_t per_slot_units = size_t(layers_) * shape_.num_kv_heads;
  const size_t lists = size_t(p_.subspaces) * p_.centroids, d = size_t(shape_.head_dim);
  auto copy = [&](auto& buf, size_t per_unit) {
    using T = std::remove_reference_t<decltype(*buf.data())>;
    const size_t n = per_slot_units * per_unit;
    check(cudaMemcpyAsync(buf.data() + size_t(dst) * n, buf.data() + size_t(src) * n, n * sizeof(T),
                          cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync (cs tables)");
  };
  copy(samples_, 2 * size_t(p_.max_points) * d);
  copy(centroids_, size_t(p_.centroids) * d);
  copy(tail_, lists);
  copy(index_, lists * stride_);
  copy(score_, lists * stride_);
  copy(size_, lists);
  if (p_.step > 1) {  // the last search and its step count, as the CPU's fork copies them
    copy(last_picks_, size_t(keep_capacity()));
    copy(last_count_, 1);
    copy(last_window_, 1);
    copy(searches_done_, 1);
  }
  check(cudaMemcpyAsync(capacities_.data() + dst, capacities_.data() + src, sizeof(int32_t), cudaMemcpyDeviceToDevice,
                        stream),
        "cudaMemcpyAsync (cs capacity)");
  info_[size_t(dst)] = info_[size_t(src)];
}

void CsState::begin_chunk(int slot, int first, int n, cudaStream_t stream) {
  SKIM_REQUIRE(slot >= 0 && slot < slots_ && n > 0, "cs: a chunk of {} rows in slot {}", n, slot);
  SlotInfo& s = info_[size_t(slot)];
  if (s.built) {  // a prompt appended after decoding began: its new keys are inserted, not sampled
    s.chunk_first = first;
    s.insert_from = std::max(s.indexed, first);
    s.indexed = std::max(s.indexed, first + n);
    return;
  }
  const int group = shape_.num_heads / shape_.num_kv_heads;
  if (s.first < 0) s.first = first, s.sample = CsSampleRoom{.room = 2L * p_.max_points};
  SKIM_REQUIRE(long(first - s.first) * group == s.sample.vectors,
               "cs: a prompt chunk at position {} does not follow the {} rows sampled so far", first,
               s.sample.vectors / group);
  for (long kept : s.sample.offer(long(n) * group))  // halvings before this chunk's rows arrive
    check(cs_halve_samples(layout(), slot, int(kept), stream), "cs_halve_samples");
}

void CsState::random_sample(int slot, int tokens, uint64_t seed, cudaStream_t stream) {
  begin_chunk(slot, 0, tokens, stream);  // as if prefilled: the sample's stride for `tokens`
  const CsUnitLayout t = layout();
  const size_t per_slot = size_t(layers_) * shape_.num_kv_heads * t.sample_capacity * shape_.head_dim;
  fill_random_f32(t.samples + size_t(slot) * per_slot, per_slot, seed, 1.0f, stream);
}

void CsState::prefill_layer(int slot, int layer, int n, const StepInputs& in, cudaStream_t stream) {
  if (dense_layer(layer)) return;
  const SlotInfo& s = info_[size_t(slot)];
  if (!s.built) {
    SKIM_REQUIRE(s.first >= 0, "cs: slot {} samples a chunk it did not begin", slot);
    check(cs_sample_queries(layout(), slot, indexed_layer(layer), in.q, in.positions, n, shape_.num_heads, s.first,
                            int(s.sample.stride), stream),
          "cs_sample_queries");
    return;
  }
  const int H = shape_.num_heads, d = shape_.head_dim;
  for (int r = std::max(0, s.insert_from - s.chunk_first); r < n; ++r) {  // one row at a time: its heaps in order
    const size_t at = size_t(r);
    const StepInputs row{.q = in.q + at * H * d, .k_pool = in.k_pool, .positions = in.positions + at,
                         .page_table = in.page_table + at * in.max_pages_per_seq,
                         .max_pages_per_seq = in.max_pages_per_seq, .row_slot = in.row_slot + at};
    check(cs_step_args(step_args(layer, 1, row), stream), "cs_step_args");
    check(cs_insert(inserts_.data(), shape_.num_kv_heads, insert_shapes(), stream), "cs_insert");
  }
}

void CsState::build(int slot, int num_keys, const std::vector<const uint16_t*>& k_pools,
                    const std::vector<int32_t>& pages, cudaStream_t stream) {
  SlotInfo& s = info_[size_t(slot)];
  SKIM_REQUIRE(!s.built && s.sample.vectors > 0 && num_keys > 0,
               "policy cs: a sequence reached decoding without prompt queries to build its tables from (cs "
               "indexes the prompt during prefill)");
  SKIM_REQUIRE(int(k_pools.size()) == shape_.num_layers, "cs: {} layer pools for {} layers", k_pools.size(),
               shape_.num_layers);
  const int kv = shape_.num_kv_heads, M = p_.subspaces;
  s.capacity = std::min(stride_, list_capacity(p_.list, num_keys));
  check(cudaMemcpy(capacities_.data() + slot, &s.capacity, sizeof(int32_t), cudaMemcpyHostToDevice),
        "cudaMemcpy (cs capacity)");
  upload(build_pages_, pages.data(), pages.size());
  const CsBuildArgsBf16 shapes{.head_dim = shape_.head_dim, .subspaces = M, .centroids = p_.centroids,
                               .iters = p_.iters, .max_points = p_.max_points, .list_capacity = s.capacity,
                               .list_stride = stride_, .score_dot = p_.score_dot};
  const size_t ws = cs_build_workspace_size(shapes, kv * M, num_keys);
  SKIM_REQUIRE(ws > 0, "policy: cs's table build does not support this shape on the GPU");
  if (build_ws_.bytes() < ws) build_ws_.resize(ws);
  const CsUnitLayout t = layout();
  std::vector<CsBuildArgsBf16> builds;
  for (int l = p_.dense_layers; l < shape_.num_layers; ++l) {  // a layer at a time: the workspace holds kv x M builds
    builds.clear();
    for (int h = 0; h < kv; ++h) {
      const size_t u = t.unit(slot, indexed_layer(l), h);
      const CsTablesView v = t.view(u);
      for (int m = 0; m < M; ++m) {
        CsBuildArgsBf16 b = shapes;
        b.subspace = m;
        b.vectors = t.samples + u * size_t(t.sample_capacity) * shape_.head_dim;
        b.num_vectors = int(s.sample.kept());  // the build takes every ceil(kept / points)-th of them
        b.k_pool = k_pools[size_t(l)];
        b.pages = build_pages_.data();
        b.page_size = shape_.page_size;
        b.num_kv_heads = kv;
        b.kv_head = h;
        b.num_keys = num_keys;
        b.centroids_out = const_cast<float*>(v.centroids);
        b.list_index = const_cast<int32_t*>(v.list_index);
        b.list_score = const_cast<uint16_t*>(v.list_score);
        b.list_size = const_cast<int32_t*>(v.list_size);
        b.tail = const_cast<float*>(v.tail);
        builds.push_back(b);
      }
    }
    check(cudaMemcpyAsync(builds_.data(), builds.data(), builds.size() * sizeof(CsBuildArgsBf16),
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (cs builds)");
    check(cs_build(builds_.data(), int(builds.size()), shapes, num_keys, {build_ws_.data(), build_ws_.bytes()}, stream),
          "cs_build");
    check(cudaStreamSynchronize(stream), "cs_build");  // `builds` is reused for the next layer
  }
  if (p_.step > 1) {  // the first decode step searches
    const size_t per_slot = size_t(layers_) * kv;
    check(cudaMemsetAsync(searches_done_.data() + size_t(slot) * per_slot, 0, per_slot * sizeof(int32_t), stream),
          "cudaMemsetAsync (cs searches)");
  }
  s.built = true;
  s.indexed = num_keys;
}

CsStepArgs CsState::step_args(int layer, int n, const StepInputs& in) {
  return {.tables = layout(), .layer = indexed_layer(layer), .n = n, .num_heads = shape_.num_heads, .q = in.q,
          .k_pool = in.k_pool, .positions = in.positions, .page_table = in.page_table,
          .max_pages_per_seq = in.max_pages_per_seq, .page_size = shape_.page_size, .row_slot = in.row_slot,
          .capacities = capacities_.data(), .window = p_.window, .keep = p_.keep, .score_dot = p_.score_dot,
          .queries = queries_.data(), .keys = keys_.data(), .inserts = inserts_.data(), .views = views_.data(),
          .context = context_.data(), .window_begin = window_begin_.data(), .n_pick = n_pick_.data()};
}

// The shapes cs_insert checks: every slot's lists at the one stride (each insert its own capacity).
CsInsertArgs CsState::insert_shapes() const {
  return {.head_dim = shape_.head_dim, .subspaces = p_.subspaces, .centroids = p_.centroids,
          .list_capacity = stride_, .list_stride = stride_, .score_dot = p_.score_dot};
}

void CsState::decode_layer(int layer, int n, const StepInputs& in, cudaStream_t stream) {
  const int kv = shape_.num_kv_heads, searches = n * kv;
  SKIM_REQUIRE(n <= shape_.max_rows && !dense_layer(layer), "cs: {} rows at layer {}", n, layer);
  CsStepArgs args = step_args(layer, n, in);
  if (p_.step > 1) {  // a search period: the units not due skip their search (a decode step's only)
    args.period = p_.step;
    args.searches_done = searches_done_.data();
    args.last_window = last_window_.data();
    args.skip = skip_.data();
    args.units = search_units_.data();
  }
  check(cs_step_args(args, stream), "cs_step_args");
  // The CPU observes (inserts) before it selects: a new key can evict a list's least entry.
  check(cs_insert(inserts_.data(), searches, insert_shapes(), stream), "cs_insert");
  check(cs_select({.searches = searches, .head_dim = shape_.head_dim, .subspaces = p_.subspaces,
                   .centroids = p_.centroids, .list_capacity = stride_, .score_dot = p_.score_dot,
                   .missing_mean = p_.missing_mean, .by_score = false, .backoff = p_.backoff,
                   .backoff_top = p_.backoff_top, .queries = queries_.data(), .tables = views_.data(),
                   .context = context_.data(), .window_begin = window_begin_.data(), .n_pick = n_pick_.data(),
                   .max_picks = shape_.max_context, .picks = picks_.data(), .pick_counts = pick_counts_.data(),
                   .skip = p_.step > 1 ? skip_.data() : nullptr},
                  {select_ws_.data(), select_ws_.bytes(), shape_.max_context}, stream),
        "cs_select");
  if (p_.step > 1)
    check(cs_keep_picks({.searches = searches, .max_picks = shape_.max_context, .keep_capacity = keep_capacity(),
                         .skip = skip_.data(), .units = search_units_.data(), .window_begin = window_begin_.data(),
                         .picks = picks_.data(), .pick_counts = pick_counts_.data(), .last_picks = last_picks_.data(),
                         .last_count = last_count_.data(), .last_window = last_window_.data()},
                        stream),
          "cs_keep_picks");
  check(cs_token_plan(picks_.data(), pick_counts_.data(), shape_.max_context, context_.data(), window_begin_.data(),
                      searches, lens_.data(), stream),
        "cs_token_plan");
}

}  // namespace skim::cuda
