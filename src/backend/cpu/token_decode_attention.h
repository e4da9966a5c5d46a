// Token decode attention on the CPU, for both element types of TokenDecodeArgsOf
// (attention/token_decode_args.h):
//  - bf16 (TokenDecodeArgs): the specification a CUDA kernel is tested against. Plain
//    definition, one query head at a time, double accumulation (attention_definition.h).
//  - fp32 (TokenDecodeArgsF32): the CPU backend's kernel over its fp32 cache, what the CPU
//    engine runs for a token plan (attention/token_plan.h): each list's runs of consecutive
//    positions are attended for the query heads that read the list, each key read once for
//    them, long lists split across threads (split_attend.h).
// Host pointers. Throws std::invalid_argument on inconsistent shapes, a list that is not
// strictly ascending, or a position at or past its sequence's length. The fp32 kernel needs the
// default pool layout (page_stride = head_stride = 0).
#pragma once

#include "attention/token_decode_args.h"

namespace skim::cpu {

void token_decode_attention(const TokenDecodeArgs& args);
void token_decode_attention(const TokenDecodeArgsF32& args);

}  // namespace skim::cpu
