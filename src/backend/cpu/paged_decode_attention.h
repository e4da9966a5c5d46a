// CPU reference of paged decode attention: the specification the CUDA kernel
// (backend/cuda/paged_decode_attention.cuh, same name, same arguments) is tested against.
// Plain definition, one query head at a time, double accumulation, bf16 inputs widened
// exactly to fp32. Host pointers; args.workspace and args.max_seq_len are not used.
#pragma once

#include "attention/paged_decode_args.h"

namespace skim::cpu {

// Throws std::invalid_argument on inconsistent shapes.
void paged_decode_attention(const PagedDecodeArgs& args);

}  // namespace skim::cpu
