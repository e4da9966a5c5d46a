// Communicator over NCCL (backend/communicator.h): one rank per GPU of this process, device i
// for rank i, collectives enqueued on the stream the rank's forward names (set_stream), so they
// run inside its CUDA graphs like any kernel. NVLink multicast (NVLS) stays off: the
// communicators are made with NCCL_NVLS_ENABLE=0 in the environment, whatever it held.
#pragma once

#include <memory>
#include <vector>

#include "backend/communicator.h"

namespace skim::cuda {

// Whether this build has NCCL (SKIM_HAVE_NCCL); without it make_nccl_communicators throws.
bool have_nccl();

// One communicator per device of `devices` (ncclCommInitAll; rank i on devices[i]), made from
// one thread; each is then used by its rank's thread only.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices);

}  // namespace skim::cuda
