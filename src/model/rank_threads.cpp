#include "model/rank_threads.h"

#include <omp.h>

namespace skim {

RankThreads::RankThreads(int ranks, int threads_per_rank) {
  for (int r = 0; r < ranks; ++r) threads_.emplace_back([this, r, threads_per_rank] { serve(r, threads_per_rank); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(int)>& fn) {
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  error_ = nullptr;
  running_ = int(threads_.size());
  ++generation_;
  start_.notify_all();
  done_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void RankThreads::serve(int rank, int threads) {
  omp_set_num_threads(threads);  // this thread's team: its share of the cores
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr error;
    try {
      (*job)(rank);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error && !error_) error_ = error;
    if (--running_ == 0) done_.notify_one();
  }
}

}  // namespace skim
