// Pre-tokenizers of tokenizer.json: they cut normalized text into the words BPE sees.
// ByteLevel, Metaspace, Split, Digits, Whitespace, WhitespaceSplit and Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace skim::tok {

struct Piece {
  std::string text;
  bool at_origin;  // starts at offset 0 of the input (Metaspace's prepend_scheme "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
  // ByteLevel: the words are raw bytes and the vocabulary is in GPT-2's byte alphabet.
  virtual bool byte_level() const { return false; }
};

// Null when the field is null; throws skim::Error on a type it does not know.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const JsonAt& spec);

}  // namespace skim::tok
