// One thread per tensor-parallel rank, kept for the engine's life: run(fn) calls fn(r) on rank
// r's thread for every rank at once and returns when all are done. Each thread first runs
// init(r): the CPU gives it its OpenMP team (omp_set_num_threads), the GPU its device
// (cudaSetDevice), so everything a rank does, built or run, happens on its own thread.
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
  RankThreads(int ranks, std::function<void(int rank)> init);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // fn must make the same collective calls on every rank (backend/communicator.h): a rank that
  // throws before a collective the others reach would leave them waiting, so what can fail for
  // one rank only (the batch's inputs) is checked before run(). Rethrows the first exception.
  void run(const std::function<void(int rank)>& fn);

 private:
  void serve(int rank, const std::function<void(int)>& init);

  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;  // run() calls so far: a thread runs each once
  int running_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::function<void(int)> init_;
  std::vector<std::thread> threads_;
};

}  // namespace skim
