#include "model/rank_threads.h"

#include <cstdio>

namespace skim {

RankThreads::RankThreads(int ranks, std::function<void(int)> init) : init_(std::move(init)) {
  for (int r = 0; r < ranks; ++r) threads_.emplace_back([this, r] { serve(r, init_); });
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

void RankThreads::serve(int rank, const std::function<void(int)>& init) {
  if (init) init(rank);
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
    } catch (const std::exception& e) {
      // Said at once: the other ranks may be waiting for this one in a collective.
      std::fprintf(stderr, "skim: rank %d: %s\n", rank, e.what());
      error = std::current_exception();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error && !error_) error_ = error;
    if (--running_ == 0) done_.notify_one();
  }
}

}  // namespace skim
