// Added tokens (tokenizer.json "added_tokens"): found in the text before anything else, by
// leftmost-longest match, with Hugging Face's lstrip / rstrip / single_word rules.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace skim::tok {

struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

struct TextSegment {
  size_t begin, end;
  int token_id;  // -1: plain text to tokenize
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text that stands for tokens[i] (its content, normalized or not).
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return tokens_.empty(); }
  // Covers the whole text, in order. Special tokens are matched only when allow_special.
  std::vector<TextSegment> split(std::string_view text, bool allow_special) const;

 private:
  // Index of the longest pattern starting at `pos`, and its length; -1 when none.
  int longest_match(std::string_view text, size_t pos, size_t* length) const;

  struct TrieNode {
    std::vector<std::pair<unsigned char, int>> children;
    int token = -1;
  };
  std::vector<TrieNode> trie_;
  std::vector<AddedToken> tokens_;
};

}  // namespace skim::tok
