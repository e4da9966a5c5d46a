// How a selector's choices sit in the cache, step after step (issue 18's design questions),
// measured on the keys it actually chooses during a teacher-forced decode: per (layer, KV head)
// list and decode step, the keys chosen (the union of the group's heads) and the 16-token pages
// holding them, so that
//  - pages x page size / keys is what a page-granular read costs against gathering the chosen
//    rows (CSAttention's tokens: nearly every page holds one at keep = 0.3);
//  - the pages chosen at step t that step t-1 chose too is how much a GPU page cache of the
//    last step's pages would hold already, and an LRU cache of 1x, 1.5x or 2x a step's pages
//    (per list, sized at its first step) gives the hit rate, hence the pages a host-memory KV
//    would copy each step;
//  - of the pages a list misses in its largest cache, how many a guess made before its query
//    exists would have copied ahead (issue 18's overlap of the copies with compute), and how
//    many of the pages such a copy brings the list then reads. Guesses: the pages the layer
//    before chose in the same step (that KV head's list, or any KV head's), and the selector's
//    choice over the layer's queries guessed from the layer before's input (InfiniGen's:
//    AttentionPolicy::speculate). Prefetched pages are not added to the cache (a first-order
//    count).
// Layers a selector keeps dense are not observed (they choose nothing).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "attention/policy.h"

namespace skim::eval {

inline constexpr std::array<double, 3> kLocalityCacheSizes = {1.0, 1.5, 2.0};  // x a step's pages
// The guesses of a list's pages before its query exists (LocalityStats::ahead_*): the layer
// before's pages of the same KV head, of all its KV heads, and the choice over queries guessed
// from the layer before's input, then from its input with its attention added (the CPU
// forward's two guesses of a step, in that order).
inline constexpr std::array<const char*, 4> kAheadGuesses = {"same_kv_head", "any_kv_head", "query_guess",
                                                             "query_guess_after_attention"};

// Sums (counts too, as doubles: exact far beyond any run), so that merging is one loop.
struct LocalityStats {
  double lists = 0;          // (layer, KV head, step) observations
  double keys = 0, pages = 0;
  double page_keys = 0;      // pages x page size: what a page-granular read loads
  double context_pages = 0;  // the pages the lists' sequences held
  double repeats = 0;        // observations with a previous step
  double overlap = 0;        // sum over those of |pages_t & pages_t-1| / |pages_t|
  std::array<double, kLocalityCacheSizes.size()> hits{}, lookups{};
  // Copies ahead, per guess (kAheadGuesses), over the lists (past the first step) for which
  // the guess exists, against the largest cache: the lists, their misses, the guessed pages the
  // cache lacked (what a prefetch copies) and those of them the list chose (misses hidden).
  std::array<double, kAheadGuesses.size()> ahead_lists{}, ahead_misses{}, ahead_copied{}, ahead_useful{};

  void merge(const LocalityStats& o);
};

class SelectionLocalityMeter {
 public:
  void attach(AttentionPolicy& policy);
  static void detach(AttentionPolicy& policy);
  void on_selection(const AttentionBatch& b, int row, int kv_head, const std::vector<std::vector<KeyRange>>& heads);
  // A choice over guessed queries of b.layer (AttentionPolicy::speculate), made before its own.
  void on_speculation(const AttentionBatch& b, int row, int kv_head, const std::vector<std::vector<KeyRange>>& heads);
  const LocalityStats& stats() const { return stats_; }

 private:
  // An LRU set of page indices of one list.
  struct Cache {
    size_t capacity = 0;
    std::map<int, uint64_t> last_use;  // page -> step
    bool touch(int page, uint64_t step);  // true on a hit
  };
  struct List {
    std::vector<int> pages;  // last step's, ascending
    std::array<Cache, kLocalityCacheSizes.size()> caches;
    uint64_t steps = 0;
  };
  // The layer before's choices in this step, as guesses for `l` (LocalityStats::ahead_*): the
  // same KV head's pages and every KV head's; false when that layer did not choose this step.
  bool guesses_from_layer_before(const PageTable* table, int layer, int kv_head, int num_kv_heads, const List& l,
                                 std::vector<int>& same, std::vector<int>& any) const;
  void count_ahead(const List& l, const std::vector<int>& pages, size_t guess, const std::vector<int>& guessed);
  struct Guess {
    std::vector<std::vector<int>> pages;  // the step's guesses in the order made
    uint64_t step = 0;                    // the list's step they guess
  };
  std::map<std::tuple<const PageTable*, int, int>, List> lists_;  // (sequence, layer, KV head)
  std::map<std::tuple<const PageTable*, int, int>, Guess> guesses_;  // on_speculation's, same keys
  LocalityStats stats_;
};

}  // namespace skim::eval
