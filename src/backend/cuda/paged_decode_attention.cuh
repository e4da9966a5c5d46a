// Paged decode attention on the GPU: split-KV flash decoding over the page table.
//
// Several CTAs share one (sequence, KV head), striding through its pages in batches of two
// (or, with args.deterministic = false, taking batches from a shared counter), and each CTA
// handles all query heads of that KV head's GQA group, so each K/V page is read from HBM
// once per call. Its warps stream pages through shared memory with cp.async, compute scores
// and P.V on the tensor cores (bf16 inputs, fp32 accumulation) and keep an online softmax;
// the CTA writes one partial state (o, lse) per query head. A second small kernel merges
// the partials with the exact log-sum-exp rule of attention/attention_state.h. When one CTA
// covers every sequence (short sequences, large batches) it writes the result directly.
//
// Same name and arguments as the CPU reference, skim::cpu::paged_decode_attention. This
// header holds no device code, so plain C++ (tests, the engine) includes it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/mac_decode_args.h"
#include "attention/paged_decode_args.h"
#include "attention/retro_decode_args.h"

namespace skim::cuda {

// Bytes of workspace a call with these shapes may need: depends on batch, num_heads,
// num_kv_heads, head_dim and the current device (its SM count), not on the lengths, so one
// allocation serves every step of a batch shape (and of smaller batches). Zero when the
// shapes are unsupported or need none.
//
// The workspace must be zero-filled once after allocation (cudaMemset): it holds counters
// that distribute pages among CTAs, and every call leaves them at zero again. Calls sharing
// one workspace must be ordered (one stream, or events).
size_t paged_decode_workspace_size(const PagedDecodeArgs& args);

// Device pointers in args; asynchronous on `stream`, allocates nothing, captures into a CUDA
// graph (the split is planned on the host from args.max_seq_len). Supported: head_dim 64 or
// 128, page_size 16, group size (num_heads / num_kv_heads) any value >= 1 (groups larger
// than 8 are processed as several sub-groups of at most 8, each reading the KV again).
// Returns cudaErrorInvalidValue for unsupported shapes or a too small workspace, else the
// launch status.
cudaError_t paged_decode_attention(const PagedDecodeArgs& args, cudaStream_t stream);

// The same call followed by RetroAttention's merge (cuda::retro_merge(retro)) of its states
// (args.o and args.lse are retro.o and retro.lse; args.o_bf16 null: retro writes the output):
// where the call splits its lists over CTAs, the chunk merge's launch runs Retro's merge as its
// epilogue (one launch where there were two); where it does not, retro_merge follows. The
// heads are retro's, twice as many where it reads the folded layout (fold_group).
cudaError_t paged_decode_attention(const PagedDecodeArgs& args, const RetroMergeArgs& retro, cudaStream_t stream);

// The same call followed by MAC's merge and push (cuda::mac_merge_push(mac)) over its one-call
// form: args attends 2n rows (n = mac.merge.batch, args.q_rows = n), the parts below the rows'
// prefix ends then the parts above, into args.o and args.lse, which are mac.merge.below_o and
// below_lse with above_o and above_lse right after them (args.o_bf16 null; mac.merge.cache_o
// and cache_lse null). Where the call splits its lists over CTAs, the chunk merge's launch
// merges, pushes and advances the rings as its epilogue (one launch where there were three),
// after each fill's step view (MacRingsView: the step's match made it the latest), leaving the
// step view as it was; where it does not, mac_merge_push follows.
cudaError_t paged_decode_attention(const PagedDecodeArgs& args, const MacMergePushArgs& mac, cudaStream_t stream);

}  // namespace skim::cuda
