// The place of every page of a batch's rows in its row's page table, indexed by page id: what
// a plan kernel needs to turn a listed page (an id) back into a position (mac_page_plan,
// retro_page_plan). Rows of a batch hold distinct pages, or the same page at the same place
// (RetroAttention's past rows share their newest row's table), so concurrent writes agree.
// This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace skim::cuda {

// index [pool pages]: index[page] = its place in its row's table, for every page of the rows'
// first ceil(seq_len / page_size) slots. Asynchronous on `stream`.
void page_index_map(const int32_t* page_table, const int32_t* seq_lens, int batch, int max_pages_per_seq,
                    int page_size, int32_t* index, cudaStream_t stream);

}  // namespace skim::cuda
