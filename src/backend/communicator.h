// The collectives tensor parallelism needs (issue 19; DESIGN.md section 3), one interface over
// an in-process CPU implementation (backend/cpu/thread_communicator.h: one thread per rank,
// what CI tests TP with) and NCCL's (one GPU per rank). Every rank of a communicator makes the
// same calls in the same order with the same counts; a call returns when its result is in
// place on the calling rank, or, for a device communicator (NCCL), once it is enqueued on the
// stream set_stream named: later work on that stream sees the result.
#pragma once

#include <cstddef>

namespace skim {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] = the sum over the ranks of their data[i], for i < count, on every rank.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // recv[r * count + i] = rank r's send[i], on every rank (recv holds size() * count floats
  // and does not overlap send).
  virtual void all_gather(const float* send, size_t count, float* recv) = 0;
  // A device communicator's stream (a cudaStream_t on its rank's GPU); the CPU's ignore it.
  virtual void set_stream(void* /*stream*/) {}
  // A rank failed: end the collectives in flight on every rank (NCCL's kernels would wait for
  // the failed rank forever), leaving the communicator unusable. The CPU's need none: what can
  // fail on one rank alone is checked before the ranks start (TensorParallelForward).
  virtual void abort() {}
};

}  // namespace skim
