// The bookkeeping of CSAttention's streamed prompt sample (the GPU's cuda::CsState): the CPU
// keeps every prompt (query, head) vector and clusters every ceil(vectors / points)-th; the GPU
// cannot keep them all and does not know a prompt's length before its last chunk (the scheduler
// appends a prompt chunk by chunk). It keeps every stride-th vector, vector v at index
// v / stride, in room for `room` of them; when a chunk would overflow the room, the sample is
// halved in place (index i takes index 2i) and the stride doubles, as often as needed, before the
// chunk's vectors arrive. So the sample is always every stride-th vector of those offered. Host
// code, no CUDA types (tested on the CPU).
#pragma once

#include <vector>

namespace skim {

struct CsSampleRoom {
  long room = 0;     // vectors the sample holds at most
  long vectors = 0;  // offered so far
  long stride = 1;   // every stride-th is kept

  long kept() const { return (vectors + stride - 1) / stride; }
  // Offers `count` more vectors; returns, in order, the sample sizes to halve before they
  // arrive (each halving doubles the stride).
  std::vector<long> offer(long count) {
    std::vector<long> halve;
    const long before = vectors;
    vectors += count;
    while (kept() > room) {
      halve.push_back((before + stride - 1) / stride);
      stride *= 2;
    }
    return halve;
  }
};

}  // namespace skim
