// The Tokenizer of a Hugging Face tokenizer.json: added tokens, normalizer, pre-tokenizer,
// BPE model, decoder and the post-processor's BOS. truncation and padding are not applied:
// the engine decides lengths itself.
//
// Known differences from Hugging Face (none shows in the golden fixtures): regexes run on PCRE2,
// not Oniguruma (\s is made to match U+0085 as Oniguruma's does; other class differences may
// remain); a pattern's empty matches are skipped; decode() returns raw bytes where Hugging
// Face returns U+FFFD for an invalid sequence.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace skim::tok {

struct TokenizerParts {
  std::vector<std::string> token_text;  // by id, as written in tokenizer.json ("Ġthe", "<s>")
  std::unordered_map<std::string, int> token_ids;
  std::vector<AddedToken> added;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;
  PromptTemplate prompt;
};

class HfTokenizer : public Tokenizer {
 public:
  explicit HfTokenizer(TokenizerParts parts);

  std::vector<int> encode(std::string_view text, bool allow_special = true) const override;
  std::string decode(const std::vector<int>& ids) const override;
  std::string token_bytes(int id) const override;
  int vocab_size() const override { return static_cast<int>(token_text_.size()); }
  int token_id(std::string_view token) const override;
  bool is_special(int id) const override;
  std::vector<int> encode_prompt(std::string_view text) const override;

 private:
  void encode_text(std::string_view text, bool at_origin, bool allow_special, std::vector<int>& out) const;

  std::vector<std::string> token_text_;
  std::vector<std::string> token_bytes_;
  std::vector<bool> special_;
  std::unordered_map<std::string, int> token_ids_;
  AddedTokenMatcher raw_added_;         // matched on the input text
  AddedTokenMatcher normalized_added_;  // matched on normalized text
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  PromptTemplate prompt_;
};

}  // namespace skim::tok
