// StreamDecoder streams the bytes each token stands for (token_bytes), not decode() of the
// whole list: a generated token continues a prompt, so its leading space is real text.
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace skim {

std::string StreamDecoder::push(int id) {
  pending_ += tok_.token_bytes(id);
  const size_t complete = tok::utf8_complete_prefix(pending_);
  // Bytes that no continuation can make valid are replaced now rather than held forever.
  std::string text = tok::utf8_replace_invalid(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return text;
}

std::string StreamDecoder::flush() {
  std::string text = tok::utf8_replace_invalid(pending_);
  pending_.clear();
  return text;
}

}  // namespace skim
