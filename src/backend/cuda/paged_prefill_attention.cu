#include "backend/cuda/paged_prefill_attention.cuh"

#include <algorithm>
#include <utility>

#include "backend/cuda/paged_decode_attention_impl.cuh"  // merge_kernel, device_info
#include "backend/cuda/paged_prefill_mma.cuh"
#include "backend/cuda/paged_prefill_sm90.cuh"

namespace skim::cuda {

namespace {

using prefill::flash_prefill_kernel;
using prefill::flash_prefill_sm90_kernel;
using prefill::flash_prefill_sm90_ws_kernel;
using prefill::kPage;
using prefill::Split;
using prefill::Tile;
using prefill::TileSm90;
using prefill::TileSm90Ws;
using prefill::WsSchedule;

// Key splits per row tile, only when the row tiles alone leave SMs idle: then enough CTAs
// for two per SM, each split at least kMinSplitKeys keys, at most kMaxSplits.
constexpr int kMaxSplits = 64;
constexpr int kMinSplitKeys = 256;
struct SplitPlan {
  int splits = 1, steps_per_split = 1 << 24;
};
SplitPlan plan_splits(int row_tiles, int units, int max_position, int keys_per_step, int sms) {
  SplitPlan p;
  const int steps = max_position / keys_per_step + 1;
  const long ctas = long(row_tiles) * units;
  if (ctas >= sms) return p;
  int s = int(std::min<long>((2L * sms + ctas - 1) / ctas, kMaxSplits));
  s = std::min(s, std::max(1, steps * keys_per_step / kMinSplitKeys));
  if (s <= 1) return p;
  p.steps_per_split = (steps + s - 1) / s;
  p.splits = (steps + p.steps_per_split - 1) / p.steps_per_split;
  return p;
}

size_t split_bytes(int n, int num_heads, int head_dim, int splits) {
  const size_t heads = size_t(n) * num_heads * splits;
  return detail::align_up(heads * head_dim * 4, 256) + detail::align_up(heads * 4, 256);
}

int sm_count() {
  detail::DeviceInfo info;
  return detail::device_info(info) == cudaSuccess ? info.sms : 132;
}

// Each kernel's shape: rows per CTA, keys per step, threads, shared memory, the kernel.
struct KernelShape {
  int rows, keys, threads, smem;
  const void* fn;
};
// The warp-specialised kernel's shape, whatever its consumers' schedule.
template <int D>
KernelShape ws_shape(void (*kernel)(PagedPrefillArgs, Split)) {
  using T = TileSm90Ws<D>;
  return {T::kRows, T::kKeys, T::kCtaThreads, T::kSmemBytes, reinterpret_cast<const void*>(kernel)};
}

template <int D>
KernelShape kernel_shape(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kMma64:
      return {Tile<D, 1>::kRows, Tile<D, 1>::kKeys, Tile<D, 1>::kThreads, Tile<D, 1>::kSmemBytes,
              reinterpret_cast<const void*>(flash_prefill_kernel<D, 1>)};
    case PrefillKernel::kMma128:
      return {Tile<D, 2>::kRows, Tile<D, 2>::kKeys, Tile<D, 2>::kThreads, Tile<D, 2>::kSmemBytes,
              reinterpret_cast<const void*>(flash_prefill_kernel<D, 2>)};
    case PrefillKernel::kWgmma:
      return {TileSm90<D>::kRows, TileSm90<D>::kKeys, TileSm90<D>::kThreads, TileSm90<D>::kSmemBytes,
              reinterpret_cast<const void*>(flash_prefill_sm90_kernel<D>)};
    case PrefillKernel::kWgmmaWs:
      return ws_shape<D>(flash_prefill_sm90_ws_kernel<D, WsSchedule::kInOrder>);
    default:
      return ws_shape<D>(flash_prefill_sm90_ws_kernel<D, WsSchedule::kPingpong>);
  }
}

// Whether the wgmma kernel has sm_90a code for this device (a build without the 90a target
// would run compute_80 PTX, where its body is empty). Asked once per device.
bool wgmma_available() {
  static detail::PerDevice<bool> known;
  bool yes = false;
  const cudaError_t e = known.get(yes, [](int, bool& y) {
    cudaFuncAttributes attr{};
    detail::DeviceInfo info;
    y = detail::device_info(info) == cudaSuccess && info.cc_major == 9 &&
        cudaFuncGetAttributes(&attr, flash_prefill_sm90_kernel<128>) == cudaSuccess && attr.ptxVersion >= 90;
    return cudaSuccess;
  });
  return e == cudaSuccess && yes;
}

// The dynamic shared memory a kernel needs, allowed once per (kernel, device): tensor
// parallelism launches on several.
cudaError_t allow_smem(const KernelShape& k, int kernel_id) {
  constexpr int kKernels = 12;  // (kind, head_dim 64 or 128)
  static detail::PerDevice<detail::Done> done[kKernels];
  return done[kernel_id].once([&k](int) {
    return cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem);
  });
}

int row_tiles(int n, int group, int rows_per_tile) { return (n * group + rows_per_tile - 1) / rows_per_tile; }

template <int D>
cudaError_t launch(const PagedPrefillArgs& a, PrefillKernel kind, cudaStream_t stream) {
  const KernelShape k = kernel_shape<D>(kind);
  if (cudaError_t e = allow_smem(k, int(kind) * 2 + (D == 128)); e != cudaSuccess) return e;
  // Several sequences: each may leave one tile part-filled; a bound, the CTAs past it return.
  const int group = a.num_heads / a.num_kv_heads, tiles = row_tiles(a.n, group, k.rows) + (a.seq_rows ? a.num_seqs : 0);
  const SplitPlan plan =
      a.workspace ? plan_splits(tiles, a.num_kv_heads, a.max_position, k.keys, sm_count()) : SplitPlan{};
  Split sp;
  if (plan.splits > 1 && a.workspace_bytes >= split_bytes(a.n, a.num_heads, D, plan.splits)) {
    sp.splits = plan.splits;
    sp.steps_per_split = plan.steps_per_split;
    sp.part_o = static_cast<float*>(a.workspace);
    sp.part_lse = reinterpret_cast<float*>(static_cast<char*>(a.workspace) +
                                           detail::align_up(size_t(a.n) * a.num_heads * sp.splits * D * 4, 256));
  }
  const dim3 grid(tiles, a.num_kv_heads, sp.splits);
  PagedPrefillArgs args = a;
  void* params[] = {&args, &sp};
  if (cudaError_t e = cudaLaunchKernel(k.fn, grid, dim3(k.threads), params, size_t(k.smem), stream); e != cudaSuccess)
    return e;
  if (sp.splits == 1) return cudaSuccess;
  const detail::MergeParams mp{.part_o = sp.part_o, .part_lse = sp.part_lse, .num_heads = a.num_heads,
                               .num_chunks = sp.splits};
  detail::merge_kernel<D><<<a.n * a.num_heads, detail::kMergeThreads, 0, stream>>>(
      mp, detail::WriteMergedState<D>{a.o, a.lse, nullptr});
  return cudaGetLastError();
}

bool supported(const PagedPrefillArgs& a) {
  return a.n >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
         (a.head_dim == 64 || a.head_dim == 128) && a.page_size == kPage && a.num_seqs >= 1 &&
         (a.num_seqs == 1 || a.seq_rows);
}

}  // namespace

bool prefill_kernel_available(PrefillKernel kind) {
  return kind == PrefillKernel::kMma64 || kind == PrefillKernel::kMma128 || wgmma_available();
}

PrefillKernel default_prefill_kernel() {
  return wgmma_available() ? PrefillKernel::kWgmmaWs : PrefillKernel::kMma128;
}

cudaError_t paged_prefill_attention_with(const PagedPrefillArgs& a, PrefillKernel kind, cudaStream_t stream) {
  if (!supported(a) || !prefill_kernel_available(kind)) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  return a.head_dim == 64 ? launch<64>(a, kind, stream) : launch<128>(a, kind, stream);
}

cudaError_t paged_prefill_attention(const PagedPrefillArgs& a, cudaStream_t stream) {
  return paged_prefill_attention_with(a, default_prefill_kernel(), stream);
}

size_t paged_prefill_workspace_size(int max_rows, int num_heads, int num_kv_heads, int head_dim, int max_position) {
  if (max_rows <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads) return 0;
  const int group = num_heads / num_kv_heads, sms = sm_count();
  size_t bytes = 0;
  for (int n = 1; n <= max_rows; ++n)
    for (auto [rows, keys] : {std::pair{64, 64}, std::pair{128, 64}, std::pair{128, 128}}) {  // every kernel
      const SplitPlan p = plan_splits(row_tiles(n, group, rows), num_kv_heads, max_position, keys, sms);
      if (p.splits > 1) bytes = std::max(bytes, split_bytes(n, num_heads, head_dim, p.splits));
    }
  return bytes;
}

}  // namespace skim::cuda
