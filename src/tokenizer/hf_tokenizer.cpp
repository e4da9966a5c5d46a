#include "tokenizer/hf_tokenizer.h"

#include "tokenizer/utf8.h"

namespace skim::tok {

HfTokenizer::HfTokenizer(TokenizerParts parts)
    : token_text_(std::move(parts.token_text)),
      special_(token_text_.size(), false),
      token_ids_(std::move(parts.token_ids)),
      normalizer_(std::move(parts.normalizer)),
      pre_tokenizer_(std::move(parts.pre_tokenizer)),
      model_(std::move(parts.model)),
      decoder_(std::move(parts.decoder)),
      prompt_(std::move(parts.prompt)) {
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  std::vector<bool> added(token_text_.size(), false);
  for (AddedToken& token : parts.added) {
    special_[token.id] = token.special;
    added[token.id] = true;
    if (token.normalized && normalizer_) {
      normalized_patterns.push_back(normalizer_->apply(token.content));
      normalized.push_back(token);
    } else {
      raw_patterns.push_back(token.content);
      raw.push_back(token);
    }
  }
  raw_added_ = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  normalized_added_ = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));

  token_bytes_.resize(token_text_.size());
  for (size_t id = 0; id < token_text_.size(); ++id) {
    if (added[id] || !decoder_) {
      token_bytes_[id] = token_text_[id];
      continue;
    }
    std::vector<std::string> one{token_text_[id]};
    decoder_->apply(one, false);
    for (const std::string& part : one) token_bytes_[id] += part;
  }
}

void HfTokenizer::encode_text(std::string_view text, bool at_origin, bool allow_special,
                              std::vector<int>& out) const {
  const std::string normalized = normalizer_ ? normalizer_->apply(std::string(text)) : std::string(text);
  for (const TextSegment& segment : normalized_added_.split(normalized, allow_special)) {
    if (segment.token_id >= 0) {
      out.push_back(segment.token_id);
      continue;
    }
    if (segment.begin == segment.end) continue;
    std::vector<Piece> pieces{{normalized.substr(segment.begin, segment.end - segment.begin),
                               at_origin && segment.begin == 0}};
    if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
    for (const Piece& piece : pieces) model_->encode_word(piece.text, out);
  }
}

std::vector<int> HfTokenizer::encode(std::string_view text, bool allow_special) const {
  // Invalid UTF-8 becomes U+FFFD first, like Python's errors="replace".
  std::string replaced;
  if (!utf8_valid(text)) {
    replaced = utf8_replace_invalid(text);
    text = replaced;
  }
  std::vector<int> ids;
  for (const TextSegment& segment : raw_added_.split(text, allow_special)) {
    if (segment.token_id >= 0) {
      ids.push_back(segment.token_id);
    } else if (segment.end > segment.begin) {
      encode_text(text.substr(segment.begin, segment.end - segment.begin), segment.begin == 0, allow_special, ids);
    }
  }
  return ids;
}

std::vector<int> HfTokenizer::encode_prompt(std::string_view text) const {
  std::vector<int> ids = prompt_.prefix;
  std::vector<int> body = encode(text, true);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), prompt_.suffix.begin(), prompt_.suffix.end());
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    // Ids outside the vocabulary have no text; Hugging Face skips them too.
    if (id >= 0 && id < vocab_size()) tokens.push_back(token_text_[id]);
  }
  std::string text;
  if (!decoder_) {
    // Hugging Face joins undecoded tokens with spaces.
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return text;
  }
  decoder_->apply(tokens, true);
  for (const std::string& part : tokens) text += part;
  return text;
}

std::string HfTokenizer::token_bytes(int id) const {
  return id >= 0 && id < vocab_size() ? token_bytes_[id] : std::string();
}

int HfTokenizer::token_id(std::string_view token) const {
  auto it = token_ids_.find(std::string(token));
  return it == token_ids_.end() ? -1 : it->second;
}

bool HfTokenizer::is_special(int id) const { return id >= 0 && id < vocab_size() && special_[id]; }

}  // namespace skim::tok
