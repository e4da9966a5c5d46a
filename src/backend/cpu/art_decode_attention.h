// ART decode attention on the CPU: the specification the CUDA kernel
// (backend/cuda/art_decode_attention.cuh, same name, same arguments) is tested against. Plain
// definition (attention/art_decode_args.h), one list at a time, double accumulation, bf16
// inputs widened exactly. Host pointers; attn.workspace, max_seq_len and deterministic unused.
#pragma once

#include "attention/art_decode_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on inconsistent shapes or parameters.
void art_decode_attention(const ArtDecodeArgs& args);

}  // namespace skim::cpu
