// The server's prefix cache: prompts of finished requests kept as engine sequences, so that a
// prompt starting with one of them starts from a copy and prefills only the rest.
//
// Entries are cut to whole prefill chunks and reused only in whole chunks: the K/V there are
// the bits a fresh prefill (chunked from position 0) writes, so a resumed request computes
// exactly what an uncached one does. Only for CPU engines (sequence copies) and policies with
// no per-sequence state besides the cache (AttentionPolicy::keeps_sequence_state: MAC rings,
// CS tables and Retro outputs would not follow a cut).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace skim {

class Engine;

class PrefixCache {
 public:
  PrefixCache(Engine& engine, int slots) : engine_(engine), slots_(slots) {}

  // Whether entries may be kept and reused under the engine's current policy.
  bool usable() const;
  // Takes a finished request's sequence: keeps its prompt's whole chunks (least recently
  // used entry out when full), or closes it when there is nothing new to keep.
  void keep(int seq, const std::vector<int>& prompt);
  // A new sequence holding the longest whole-chunk prefix of `prompt` an entry has (the last
  // token always left to prefill), and that prefix's length; {-1, 0} when none.
  std::pair<int, int> reuse(const std::vector<int>& prompt);
  void clear();  // closes every entry

  uint64_t hits() const { return hits_; }
  uint64_t tokens_reused() const { return tokens_reused_; }

 private:
  struct Entry {
    int seq;
    std::vector<int> tokens;  // what the sequence holds
    uint64_t used;            // LRU clock
  };
  Engine& engine_;
  int slots_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0, hits_ = 0, tokens_reused_ = 0;
};

}  // namespace skim
