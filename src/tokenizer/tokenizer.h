// Hugging Face tokenizer.json: byte-level BPE (GPT-2, Llama 3, Qwen pre-tokenizers) and
// Metaspace / SentencePiece-style BPE with byte fallback (Llama 2, Mistral), with added and
// special tokens.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace skim {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Special tokens in the text ("<|endoftext|>") become their ids when allow_special is true;
  // otherwise their text is tokenized like any other (non-special added tokens still match).
  // Invalid UTF-8 is first replaced by U+FFFD, as Python's errors="replace" does.
  virtual std::vector<int> encode(std::string_view text, bool allow_special = true) const = 0;
  // Bytes of the tokens joined; may be invalid UTF-8 when cut mid-character.
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  virtual std::string token_bytes(int id) const = 0;  // raw bytes a token stands for
  virtual int vocab_size() const = 0;
  virtual int token_id(std::string_view token) const = 0;  // -1 when absent
  virtual bool is_special(int id) const = 0;

  // Adds the post-processor's BOS when the tokenizer.json template has one.
  virtual std::vector<int> encode_prompt(std::string_view text) const = 0;
};

// Parses tokenizer.json; throws skim::Error naming the file and field on what it cannot use.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& tokenizer_json);
std::unique_ptr<Tokenizer> parse_tokenizer(const std::string& json_text, const std::string& source);

// Streams decoded text token by token, holding back an incomplete UTF-8 tail until the bytes
// that finish it arrive (so a terminal never sees half a character). It streams token_bytes,
// so a first token keeps its leading space (it continues a prompt), unlike decode(). Bytes
// that can never become valid are replaced by U+FFFD at once.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int id);  // text that is complete after this token
  std::string flush();       // whatever is held back, invalid bytes replaced by U+FFFD

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace skim
