// PerDevice (backend/cuda/device_info.h), the once-per-device values the launchers keep (shared
// memory attributes set, CTAs an SM holds): computed on a device's first call and kept, computed
// again after a call that failed, every call past the devices it keeps, and once per device when
// threads ask together (tensor parallelism launches from a thread a device). No device needed.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "backend/cuda/device_info.h"

namespace skim {
namespace {

TEST(PerDevice, ComputesOnceADeviceAndKeepsNoFailure) {
  cuda::detail::PerDevice<int> kept;
  int calls = 0, v = 0;
  auto value = [&](int dev, int& out) {
    ++calls;
    out = 10 + dev;
    return cudaSuccess;
  };
  auto failing = [&](int, int& out) {
    ++calls;
    out = -1;
    return cudaErrorInvalidValue;
  };
  EXPECT_EQ(kept.get(0, v, value), cudaSuccess);
  EXPECT_EQ(v, 10);
  EXPECT_EQ(kept.get(0, v, failing), cudaSuccess);  // kept: not computed again
  EXPECT_EQ(v, 10);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(kept.get(3, v, value), cudaSuccess);
  EXPECT_EQ(v, 13);
  EXPECT_EQ(calls, 2);
  v = 7;
  EXPECT_EQ(kept.get(5, v, failing), cudaErrorInvalidValue);
  EXPECT_EQ(v, 7);  // a failure hands back nothing
  EXPECT_EQ(kept.get(5, v, value), cudaSuccess);
  EXPECT_EQ(v, 15);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(kept.get(100, v, value), cudaSuccess);  // past the devices it keeps: every call
  EXPECT_EQ(kept.get(100, v, value), cudaSuccess);
  EXPECT_EQ(v, 110);
  EXPECT_EQ(calls, 6);
}

TEST(PerDevice, OnceRunsOnceADeviceAndAgainAfterAFailure) {
  cuda::detail::PerDevice<cuda::detail::Done> done;
  int calls = 0;
  cudaError_t result = cudaErrorInvalidValue;
  auto set = [&](int) {
    ++calls;
    return result;
  };
  EXPECT_EQ(done.once(2, set), cudaErrorInvalidValue);
  result = cudaSuccess;
  EXPECT_EQ(done.once(2, set), cudaSuccess);
  EXPECT_EQ(done.once(2, set), cudaSuccess);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(done.once(4, set), cudaSuccess);
  EXPECT_EQ(calls, 3);
}

TEST(PerDevice, ThreadsAskingTogetherComputeOnce) {
  cuda::detail::PerDevice<int> kept;
  std::atomic<int> calls{0};
  std::vector<int> got(8, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      int v = 0;
      const cudaError_t e = kept.get(t % 2, v, [&](int dev, int& out) {
        calls.fetch_add(1);
        std::this_thread::yield();
        out = 20 + dev;
        return cudaSuccess;
      });
      got[size_t(t)] = e == cudaSuccess ? v : -1;
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(calls.load(), 2);
  for (int t = 0; t < 8; ++t) EXPECT_EQ(got[size_t(t)], 20 + t % 2) << "thread " << t;
}

}  // namespace
}  // namespace skim
