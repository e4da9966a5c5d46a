// Normalizers of tokenizer.json: NFC/NFD/NFKC/NFKD, Prepend, Replace, Lowercase, Strip and
// Sequence. Each maps valid UTF-8 to valid UTF-8.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/json_fields.h"

namespace skim::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string apply(std::string text) const = 0;
};

class Regex;
// {"String": "..."} (literal) or {"Regex": "..."}, the pattern of Replace and Split components.
std::unique_ptr<Regex> parse_pattern(const JsonAt& pattern);

// Null when the field is null; throws skim::Error on a type it does not know.
std::unique_ptr<Normalizer> parse_normalizer(const JsonAt& spec);

}  // namespace skim::tok
