// Communicator over threads of one process (backend/communicator.h): rank r is the thread that
// holds make_thread_communicators(n)[r]. Every collective is deterministic: element i of a sum
// adds the ranks' values in rank order, whichever thread computes it, so all ranks end with the
// same bits and a run repeats exactly.
#pragma once

#include <memory>
#include <vector>

#include "backend/communicator.h"

namespace skim {

// n communicators that talk to each other, one per rank. The caller hands each to its thread.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n);

}  // namespace skim
