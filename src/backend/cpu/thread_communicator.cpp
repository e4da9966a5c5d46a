#include "backend/cpu/thread_communicator.h"

#include <algorithm>
#include <barrier>

#include "core/error.h"

namespace skim {

namespace {

// What the ranks share: a barrier and each rank's published buffers.
struct ThreadGroup {
  explicit ThreadGroup(int n) : size(n), sync(n), send(size_t(n)), recv(size_t(n)) {}
  int size;
  std::barrier<> sync;
  std::vector<const float*> send;  // all_gather's inputs
  std::vector<float*> recv;        // all_reduce_sum's buffers
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  // Reduce-scatter then all-gather: rank r sums its share of the elements over every rank's
  // buffer (in rank order), then writes that share into every buffer once all have read.
  void all_reduce_sum(float* data, size_t count) override {
    ThreadGroup& g = *group_;
    if (g.size == 1) return;
    g.recv[size_t(rank_)] = data;
    g.sync.arrive_and_wait();  // every buffer published
    const size_t per = (count + size_t(g.size) - 1) / size_t(g.size);
    const size_t begin = std::min(count, per * size_t(rank_)), end = std::min(count, begin + per);
    sum_.assign(end - begin, 0.0f);
    for (int r = 0; r < g.size; ++r)
      for (size_t i = begin; i < end; ++i) sum_[i - begin] += g.recv[size_t(r)][i];
    g.sync.arrive_and_wait();  // every share read before any is overwritten
    for (int r = 0; r < g.size; ++r)
      std::copy(sum_.begin(), sum_.end(), g.recv[size_t(r)] + begin);
    g.sync.arrive_and_wait();  // every share written before any rank reads its result
  }

  void all_gather(const float* send, size_t count, float* recv) override {
    ThreadGroup& g = *group_;
    g.send[size_t(rank_)] = send;
    g.sync.arrive_and_wait();
    for (int r = 0; r < g.size; ++r) std::copy_n(g.send[size_t(r)], count, recv + size_t(r) * count);
    g.sync.arrive_and_wait();  // no rank reuses its send buffer while another still copies it
  }

 private:
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  std::vector<float> sum_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n) {
  SKIM_REQUIRE(n >= 1, "thread communicator: {} ranks", n);
  auto group = std::make_shared<ThreadGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return out;
}

}  // namespace skim
