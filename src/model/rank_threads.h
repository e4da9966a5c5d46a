// One thread per tensor-parallel rank, kept for the engine's life: run(fn) calls fn(r) on rank
// r's thread for every rank at once and returns when all are done. Each thread keeps its own
// OpenMP team of `threads_per_rank` threads, so the ranks' kernels run side by side.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace skim {

class RankThreads {
 public:
  RankThreads(int ranks, int threads_per_rank);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // fn must make the same collective calls on every rank (backend/communicator.h): a rank that
  // throws before a collective the others reach would leave them waiting, so what can fail for
  // one rank only (the batch's inputs) is checked before run(). Rethrows the first exception.
  void run(const std::function<void(int rank)>& fn);

 private:
  void serve(int rank, int threads);

  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;  // run() calls so far: a thread runs each once
  int running_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace skim
