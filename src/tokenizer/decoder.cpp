#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace skim::tok {

namespace {

class ByteLevelDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens, bool) const override {
    std::string bytes;
    for (std::string& token : tokens) {
      // A token outside the byte alphabet (an added token) stands for its own text.
      if (byte_level_to_bytes(token, bytes)) token = bytes;
    }
  }
};

// "<0x0A>" -> 0x0A; -1 when the token is not a byte token.
int byte_token_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(token[3]), lo = hex(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens, bool) const override {
    for (std::string& token : tokens) {
      if (int value = byte_token_value(token); value >= 0) token = std::string(1, static_cast<char>(value));
    }
  }
};

class FuseDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens, bool) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::vector<std::string>& tokens, bool) const override {
    for (std::string& token : tokens) {
      if (!utf8_valid(token)) continue;  // a lone byte from byte fallback holds no pattern
      std::string out;
      size_t previous = 0;
      for (const Span& m : pattern_->find_all(token)) {
        out.append(token, previous, m.first - previous);
        out += content_;
        previous = m.second;
      }
      out.append(token, previous, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Strips up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens, bool whole_text) const override {
    if (!whole_text || content_.empty()) return;
    for (std::string& token : tokens) {
      size_t begin = 0, end = token.size();
      for (size_t i = 0; i < start_ && end - begin >= content_.size() &&
                         token.compare(begin, content_.size(), content_) == 0; ++i) {
        begin += content_.size();
      }
      for (size_t i = 0; i < stop_ && end - begin >= content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0; ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void apply(std::vector<std::string>& tokens, bool whole_text) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      std::string out;
      size_t previous = 0;
      for (size_t pos = token.find(replacement_); pos != std::string::npos && !replacement_.empty();
           pos = token.find(replacement_, pos + replacement_.size())) {
        out.append(token, previous, pos - previous);
        // The space the pre-tokenizer prepended to the text is not part of it.
        if (!(whole_text && strip_first_ && i == 0 && pos == 0)) out += ' ';
        previous = pos + replacement_.size();
      }
      out.append(token, previous, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& tokens, bool whole_text) const override {
    for (const auto& step : steps_) step->apply(tokens, whole_text);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

size_t count(const JsonAt& spec, std::string_view key) {
  const int64_t value = spec.at(key).integer();
  if (value < 0 || value > 1'000'000) spec.at(key).fail("expected a small non-negative count");
  return static_cast<size_t>(value);
}

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const JsonAt& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(parse_pattern(spec.at("pattern")), spec.at("content").str());
  if (type == "Strip") return std::make_unique<StripDecoder>(spec.at("content").str(), count(spec, "start"), count(spec, "stop"));
  if (type == "Metaspace") {
    std::string replacement = spec.str("replacement", "\xE2\x96\x81");
    bool strip_first = true;
    if (spec.has("prepend_scheme")) {
      std::string scheme = spec.at("prepend_scheme").str();
      if (scheme != "first" && scheme != "always" && scheme != "never") {
        spec.at("prepend_scheme").fail("unknown prepend_scheme '" + scheme + "'");
      }
      strip_first = scheme != "never";
    } else if (spec.has("add_prefix_space")) {
      strip_first = spec.at("add_prefix_space").boolean();
    }
    return std::make_unique<MetaspaceDecoder>(replacement, strip_first);
  }
  if (type == "Sequence") {
    JsonAt list = spec.at("decoders");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      JsonAt item = list.at(i);
      if (item.is_null()) item.fail("expected a decoder");
      steps.push_back(parse_decoder(item));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  spec.at("type").fail("unknown decoder type '" + type + "'");
}

}  // namespace skim::tok
