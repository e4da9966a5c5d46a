// The BPE model: vocabulary, ranked merges, byte fallback, and a cache of encoded words.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace skim::tok {

struct BpeOptions {
  bool byte_level = false;     // words are raw bytes; one byte is one initial symbol
  bool byte_fallback = false;  // unknown characters become their <0xNN> byte tokens
  bool ignore_merges = false;  // a word found whole in the vocabulary is one token
  int unk_id = -1;
  bool fuse_unk = false;
};

class BpeModel {
 public:
  // `vocab` and `merges` are in the model's symbol space (raw bytes when byte_level).
  // Throws skim::Error (naming `source`) on merges whose parts or result are not in vocab.
  BpeModel(std::unordered_map<std::string, int> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& source);

  // Appends the tokens of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int>& out) const;
  int find(std::string_view symbol) const;  // -1 when absent

 private:
  void merge_symbols(std::vector<int>& ids) const;
  void initial_symbols(std::string_view word, std::vector<int>& ids) const;

  std::unordered_map<std::string, int> vocab_;
  struct Merge {
    int rank;
    int result;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  std::array<int, 256> byte_tokens_{};           // <0xNN> ids, -1 when absent
  BpeOptions options_;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

}  // namespace skim::tok
