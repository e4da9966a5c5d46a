// Paged decode attention on the CPU, for both element types of PagedDecodeArgsOf:
//  - bf16 (PagedDecodeArgs): the specification the CUDA kernel
//    (backend/cuda/paged_decode_attention.cuh, same name, same arguments) is tested against.
//    Plain definition, one query head at a time, double accumulation, bf16 inputs widened
//    exactly to fp32.
//  - fp32 (PagedDecodeArgsF32): the CPU backend's kernel over its fp32 cache, what the CPU
//    engine runs for a page plan (attention/page_plan.h). Each key is read once for the
//    query heads of its GQA group that attend it (with head_masks, each head its own pages) and
//    long lists are split across threads, their states merged (split_attend.h); tested
//    against the definition on bf16-exact inputs. Needs the default pool layout
//    (page_stride = head_stride = 0); lse may be null.
// Host pointers; args.workspace, args.max_seq_len and args.deterministic are not used.
#pragma once

#include "attention/paged_decode_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on inconsistent shapes or a seq_len out of range.
void paged_decode_attention(const PagedDecodeArgs& args);
void paged_decode_attention(const PagedDecodeArgsF32& args);

}  // namespace skim::cpu
