// Decoders of tokenizer.json: they turn token strings back into text. ByteLevel, Metaspace,
// Replace, ByteFallback, Fuse, Strip and Sequence, applied as a chain over the token list
// like Hugging Face does. Output is bytes: it may be invalid UTF-8 when cut mid-character.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace skim::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // `whole_text`: the tokens start the text, so first-token rules apply (Metaspace dropping
  // the prepended space, Strip); false when decoding one token on its own for token_bytes.
  virtual void apply(std::vector<std::string>& tokens, bool whole_text) const = 0;
};

// Null when the field is null; throws skim::Error on a type it does not know.
std::unique_ptr<Decoder> parse_decoder(const JsonAt& spec);

}  // namespace skim::tok
