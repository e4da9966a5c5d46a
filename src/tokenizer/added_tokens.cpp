#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace skim::tok {

namespace {

// The code point that ends text[0, end); text is valid UTF-8.
char32_t last_char(std::string_view text, size_t end, size_t* start) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  size_t length = 0;
  *start = pos;
  return utf8_decode(text, pos, &length);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  trie_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;  // an empty token can never be found in text
    int node = 0;
    for (char c : pattern) {
      const auto byte = static_cast<unsigned char>(c);
      int child = -1;
      for (const auto& [b, index] : trie_[node].children)
        if (b == byte) child = index;
      if (child < 0) {
        child = static_cast<int>(trie_.size());
        trie_[node].children.emplace_back(byte, child);
        trie_.emplace_back();
      }
      node = child;
    }
    if (trie_[node].token < 0) trie_[node].token = static_cast<int>(t);
  }
}

int AddedTokenMatcher::longest_match(std::string_view text, size_t pos, size_t* length) const {
  int best = -1;
  int node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    int child = -1;
    for (const auto& [b, index] : trie_[node].children)
      if (b == byte) child = index;
    if (child < 0) break;
    node = child;
    if (trie_[node].token >= 0) {
      best = trie_[node].token;
      *length = i + 1 - pos;
    }
  }
  return best;
}

std::vector<TextSegment> AddedTokenMatcher::split(std::string_view text, bool allow_special) const {
  std::vector<TextSegment> segments;
  size_t done = 0;  // text before this offset is in segments
  for (size_t pos = 0; pos < text.size() && !tokens_.empty();) {
    size_t length = 0;
    const int t = longest_match(text, pos, &length);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[t];
    size_t start = pos, stop = pos + length;
    pos = stop;  // the next search starts after this match whether it is used or not
    if (token.special && !allow_special) continue;
    if (start < done) continue;  // inside the whitespace an rstrip token already took
    if (token.single_word) {
      size_t before = 0, after_length = 0;
      const bool word_before = start > 0 && is_word_char(last_char(text, start, &before));
      const bool word_after = stop < text.size() && is_word_char(utf8_decode(text, stop, &after_length));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (start > done) {
        size_t char_start = 0;
        if (!is_unicode_whitespace(last_char(text, start, &char_start))) break;
        start = char_start;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t char_length = 0;
        if (!is_unicode_whitespace(utf8_decode(text, stop, &char_length))) break;
        stop += char_length;
      }
      pos = std::max(pos, stop);
    }
    if (start > done) segments.push_back({done, start, -1});
    segments.push_back({start, stop, token.id});
    done = stop;
  }
  if (done < text.size() || segments.empty()) segments.push_back({done, text.size(), -1});
  return segments;
}

}  // namespace skim::tok
