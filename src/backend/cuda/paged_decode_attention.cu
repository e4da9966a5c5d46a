// The library's instantiations of paged decode attention: one tuned variant per head_dim
// (detail::DefaultVariant; the sweep is in bench/attention/, results in bench/results/).
#include "backend/cuda/paged_decode_attention.cuh"

#include "backend/cuda/mac_decode.cuh"
#include "backend/cuda/mac_merge_state.cuh"
#include "backend/cuda/paged_decode_attention_impl.cuh"
#include "backend/cuda/retro_decode.cuh"
#include "backend/cuda/retro_merge_state.cuh"

namespace skim::cuda {

namespace {

template <int D>
using Default = detail::DefaultVariant<D>;

}  // namespace

size_t paged_decode_workspace_size(const PagedDecodeArgs& args) {
  if (!detail::supported(args)) return 0;
  size_t bytes = 0;
  const cudaError_t e = args.head_dim == 64 ? Default<64>::workspace_size(args, bytes)
                                            : Default<128>::workspace_size(args, bytes);
  return e == cudaSuccess ? bytes : 0;
}

cudaError_t paged_decode_attention(const PagedDecodeArgs& args, cudaStream_t stream) {
  if (!detail::supported(args)) return cudaErrorInvalidValue;
  return args.head_dim == 64 ? Default<64>::launch(args, stream)
                             : Default<128>::launch(args, stream);
}

namespace {

// The call with its chunk merge's epilogue; where it does not split its lists (one CTA took each
// list: the states are in args.o and args.lse), `unsplit` merges them in a launch of its own.
template <class Epilogue, class Unsplit>
cudaError_t launch_with_epilogue(const PagedDecodeArgs& args, const Epilogue& epilogue, cudaStream_t stream,
                                 Unsplit unsplit) {
  detail::Plan plan;
  const cudaError_t e = args.head_dim == 64 ? Default<64>::launch_with(args, epilogue, stream, 0, &plan)
                                            : Default<128>::launch_with(args, epilogue, stream, 0, &plan);
  if (e != cudaSuccess || !plan.direct) return e;
  return unsplit();
}

}  // namespace

cudaError_t paged_decode_attention(const PagedDecodeArgs& args, const RetroMergeArgs& retro, cudaStream_t stream) {
  const int heads = (retro.fold_group > 0 ? 2 : 1) * retro.num_heads;
  if (!detail::supported(args) || !retro_merge_supported(retro) || args.o_bf16 != nullptr || args.o != retro.o ||
      args.lse != retro.lse || args.batch != retro.batch || args.num_heads != heads || args.head_dim != retro.head_dim)
    return cudaErrorInvalidValue;
  return launch_with_epilogue(args, detail::RetroMergeEpilogue{retro}, stream,
                              [&] { return retro_merge(retro, stream); });
}

cudaError_t paged_decode_attention(const PagedDecodeArgs& args, const MacMergePushArgs& mac, cudaStream_t stream) {
  const MacMergeArgs& m = mac.merge;
  const size_t n = size_t(m.batch), H = size_t(m.num_heads), d = size_t(m.head_dim);
  const bool packed = m.above_o && m.above_lse && m.above_o == m.below_o + n * H * d &&
                      m.above_lse == m.below_lse + n * H;
  if (!detail::supported(args) || m.batch <= 0 || !packed || args.o_bf16 != nullptr || args.o != m.below_o ||
      args.lse != m.below_lse || args.batch != 2 * m.batch || args.q_rows != m.batch ||
      args.num_heads != m.num_heads || args.head_dim != m.head_dim || m.cache_o || m.cache_lse)
    return cudaErrorInvalidValue;
  return launch_with_epilogue(args, detail::MacMergePushEpilogue{mac}, stream,
                              [&] { return mac_merge_push(mac, stream); });
}

}  // namespace skim::cuda
