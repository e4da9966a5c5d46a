#include "backend/cuda/nccl_communicator.h"

#include <atomic>
#include <cstdlib>

#include "core/error.h"

#ifdef SKIM_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace skim::cuda {

#ifdef SKIM_HAVE_NCCL

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclCommunicator() override {
    if (!aborted_) ncclCommDestroy(comm_);
  }
  void abort() override {
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_stream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }
  void all_reduce_sum(float* data, size_t count) override {
    if (size_ > 1) check_nccl(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  }
  void all_gather(const float* send, size_t count, float* recv) override {
    check_nccl(ncclAllGather(send, recv, count, ncclFloat32, comm_, stream_), "ncclAllGather");
  }

 private:
  ncclComm_t comm_;
  int rank_, size_;
  cudaStream_t stream_ = nullptr;
  std::atomic<bool> aborted_{false};
};

}  // namespace

bool have_nccl() { return true; }

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  const int n = int(devices.size());
  for (int d : devices) SKIM_REQUIRE(d >= 0 && d < count, "--tp: GPU {} wanted, this machine has {} GPU(s)", d, count);
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // never NVLink multicast (see the header)
  // Connections made at init rather than at a first use, which may be inside a graph capture
  // (where setting them up fails); the user's choice stands if set.
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  check_nccl(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_unique<NcclCommunicator>(comms[size_t(i)], i, n));
  return out;
}

#else

bool have_nccl() { return false; }

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices) {
  throw Error(fmt::format("--tp {} with --device cuda: this skim was built without NCCL (install it with the CUDA "
                          "toolkit, or point NCCL_HOME at it, and rebuild)", devices.size()));
}

#endif

}  // namespace skim::cuda
