#include "engine/prefix_cache.h"

#include <algorithm>

#include "attention/policy.h"
#include "skim/engine.h"

namespace skim {

bool PrefixCache::usable() const {
  return slots_ > 0 && !engine_.policy().keeps_sequence_state();
}

void PrefixCache::keep(int seq, const std::vector<int>& prompt) {
  const int chunk = engine_.prefill_chunk();
  const size_t whole = prompt.size() / size_t(chunk) * size_t(chunk);
  const bool held = std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.tokens.size() >= whole && std::equal(prompt.begin(), prompt.begin() + std::ptrdiff_t(whole), e.tokens.begin());
  });
  if (whole == 0 || held) {
    engine_.close_sequence(seq);
    return;
  }
  engine_.truncate_sequence(seq, int(whole));
  // A prompt's cache is the same under every policy (prefill is dense): held under the
  // engine's, so that a finished request's policy does not stay registered on the GPU.
  engine_.set_sequence_policy(seq, engine_.policy_spec());
  entries_.push_back({seq, std::vector<int>(prompt.begin(), prompt.begin() + std::ptrdiff_t(whole)), ++clock_});
  if (int(entries_.size()) > slots_) {
    auto lru = std::min_element(entries_.begin(), entries_.end(),
                                [](const Entry& a, const Entry& b) { return a.used < b.used; });
    engine_.close_sequence(lru->seq);
    entries_.erase(lru);
  }
}

std::pair<int, int> PrefixCache::reuse(const std::vector<int>& prompt) {
  const int chunk = engine_.prefill_chunk();
  Entry* best = nullptr;
  int best_len = 0;
  for (Entry& e : entries_) {
    const size_t n = std::min(e.tokens.size(), prompt.size() - 1);
    const size_t common = size_t(std::mismatch(e.tokens.begin(), e.tokens.begin() + std::ptrdiff_t(n), prompt.begin()).first -
                                 e.tokens.begin());
    const int whole = int(common) / chunk * chunk;
    if (whole > best_len) best = &e, best_len = whole;
  }
  if (!best) return {-1, 0};
  best->used = ++clock_;
  const int seq = engine_.fork_sequence(best->seq);
  if (best_len < int(best->tokens.size())) engine_.truncate_sequence(seq, best_len);
  hits_ += 1;
  tokens_reused_ += uint64_t(best_len);
  return {seq, best_len};
}

void PrefixCache::clear() {
  for (const Entry& e : entries_) engine_.close_sequence(e.seq);
  entries_.clear();
}

}  // namespace skim
