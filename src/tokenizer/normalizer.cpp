#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_normalize.h"
#include "tokenizer/utf8.h"

namespace skim::tok {

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string apply(std::string text) const override { return unicode_normalize(text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string apply(std::string text) const override { return unicode_lowercase(text); }
};

// Llama 2's normalizer prepends "▁" to every non-empty piece of text.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string apply(std::string text) const override { return text.empty() ? text : prefix_ + text; }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string apply(std::string text) const override {
    std::string out;
    size_t previous = 0;
    for (const Span& m : pattern_->find_all(text)) {
      out.append(text, previous, m.first - previous);
      out += content_;
      previous = m.second;
    }
    out.append(text, previous, std::string::npos);
    return out;
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string apply(std::string text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t length = 0;
        if (!is_unicode_whitespace(utf8_decode(text, begin, &length))) break;
        begin += length;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t length = 0;
        if (!is_unicode_whitespace(utf8_decode(text, start, &length))) break;
        end = start;
      }
    }
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string apply(std::string text) const override {
    for (const auto& step : steps_) text = step->apply(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

// {"String": "..."} or {"Regex": "..."}, shared by Replace and Split components.
std::unique_ptr<Regex> parse_pattern(const JsonAt& pattern) {
  if (pattern.has("String")) return std::make_unique<Regex>(pattern.at("String").str(), true, pattern.source() + ": field '" + pattern.path() + ".String'");
  if (pattern.has("Regex")) return std::make_unique<Regex>(pattern.at("Regex").str(), false, pattern.source() + ": field '" + pattern.path() + ".Regex'");
  pattern.fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> parse_normalizer(const JsonAt& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.type();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(spec.at("prepend").str());
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(parse_pattern(spec.at("pattern")), spec.at("content").str());
  if (type == "Strip") return std::make_unique<StripNormalizer>(spec.boolean("strip_left", true), spec.boolean("strip_right", true));
  if (type == "Sequence") {
    JsonAt list = spec.at("normalizers");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      JsonAt item = list.at(i);
      if (item.is_null()) item.fail("expected a normalizer");
      steps.push_back(parse_normalizer(item));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  spec.at("type").fail("unknown normalizer type '" + type + "'");
}

}  // namespace skim::tok
