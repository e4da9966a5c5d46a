// PCRE2 regular expressions with Unicode properties (\p{L}, \p{N}), as Hugging Face's
// Oniguruma patterns expect.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skim::tok {

using Span = std::pair<size_t, size_t>;  // [begin, end) byte offsets

class Regex {
 public:
  // `where` names the tokenizer.json field for the error when the pattern does not compile.
  Regex(std::string_view pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-empty, non-overlapping matches left to right. `text` must be valid UTF-8.
  std::vector<Span> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string where_;
};

// Oniguruma's \s also matches U+0085 (NEL), PCRE2's does not: rewrite \s and \S to agree.
std::string oniguruma_compatible(std::string_view pattern);

}  // namespace skim::tok
