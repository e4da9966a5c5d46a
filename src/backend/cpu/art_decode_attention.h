// ART decode attention on the CPU, for both element types of ArtDecodeArgsOf:
//  - bf16 (ArtDecodeArgs): the specification the CUDA kernel (backend/cuda/
//    art_decode_attention.cuh, same name, same arguments) is tested against. Plain definition
//    (attention/art_decode_args.h), one list at a time, double accumulation, bf16 inputs
//    widened exactly.
//  - fp32 (ArtDecodeArgsF32): the CPU backend's kernel, what the CPU engine runs for ART's group
//    rule over a visiting plan: the same rule, lists in parallel, each block's keys read once
//    for the heads that attend them and merged into fp32 running states; also any head_dim,
//    page size and group, rounds of any number of pages, blocks of art.block_pages, the test on
//    the whole output (art.full_test). Needs the default pool layout; lse may be null.
// Host pointers; attn.workspace, max_seq_len and deterministic unused.
#pragma once

#include "attention/art_decode_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on inconsistent shapes or parameters.
void art_decode_attention(const ArtDecodeArgs& args);
void art_decode_attention(const ArtDecodeArgsF32& args);

}  // namespace skim::cpu
