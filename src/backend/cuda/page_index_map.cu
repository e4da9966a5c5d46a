// The page index map kernel (see page_index_map.cuh).
#include "backend/cuda/page_index_map.cuh"

#include "backend/cuda/pdl.cuh"

namespace skim::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) page_index_map_kernel(const int32_t* page_table, const int32_t* seq_lens,
                                                                  int max_pages_per_seq, int page_size, int32_t* index) {
  detail::pdl_enter();  // launched by launch_pdl
  const int b = blockIdx.x;
  const int len = min(max(seq_lens[b], 0), max_pages_per_seq * page_size), m = (len + page_size - 1) / page_size;
  const int32_t* table = page_table + size_t(b) * max_pages_per_seq;
  for (int i = threadIdx.x; i < m; i += kThreads) index[table[i]] = i;
}

}  // namespace

void page_index_map(const int32_t* page_table, const int32_t* seq_lens, int batch, int max_pages_per_seq,
                    int page_size, int32_t* index, cudaStream_t stream) {
  if (batch > 0)
    (void)launch_pdl(page_index_map_kernel, batch, kThreads, 0, stream, page_table, seq_lens, max_pages_per_seq, page_size, index);
}

}  // namespace skim::cuda
