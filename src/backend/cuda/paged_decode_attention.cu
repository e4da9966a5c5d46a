// The library's instantiations of paged decode attention: one tuned variant per head_dim
// (detail::DefaultVariant; the sweep is in bench/attention/, results in bench/results/).
#include "backend/cuda/paged_decode_attention.cuh"

#include "backend/cuda/paged_decode_attention_impl.cuh"

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

}  // namespace skim::cuda
