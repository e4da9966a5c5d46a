#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/split.h"

namespace skim::tok {

namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Cuts every piece at the matches of a pattern.
void split_all(std::vector<Piece>& pieces, const Regex& pattern, SplitBehavior behavior, bool invert) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    std::vector<Span> spans = split_pieces(piece.text.size(), pattern.find_all(piece.text), behavior, invert);
    for (const Span& s : spans) {
      out.push_back({piece.text.substr(s.first, s.second - s.first), piece.at_origin && s.first == 0});
    }
  }
  pieces = std::move(out);
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<Piece>& pieces) const override { split_all(pieces, *pattern_, behavior_, invert_); }

 private:
  std::unique_ptr<Regex> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) pattern_ = std::make_unique<Regex>(kGpt2Pattern, false, where);
  }
  void apply(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& piece : pieces)
        if (piece.text.empty() || piece.text[0] != ' ') piece.text.insert(0, 1, ' ');
    }
    if (pattern_) split_all(pieces, *pattern_, SplitBehavior::kIsolated, false);
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> pattern_;
};

enum class PrependScheme { kFirst, kAlways, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece& piece : pieces) {
      std::string text;
      for (char c : piece.text) {
        if (c == ' ') text += replacement_;
        else text += c;
      }
      const bool starts_with_replacement = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts_with_replacement && (scheme_ == PrependScheme::kAlways ||
                                       (scheme_ == PrependScheme::kFirst && piece.at_origin))) {
        text.insert(0, replacement_);
      }
      if (!split_) {
        out.push_back({std::move(text), piece.at_origin});
        continue;
      }
      // MergedWithNext on the replacement: every word keeps its leading "▁".
      size_t begin = 0;
      for (size_t pos = replacement_.size() > 0 ? text.find(replacement_, 1) : std::string::npos;
           pos != std::string::npos; pos = text.find(replacement_, pos + replacement_.size())) {
        if (pos > begin) out.push_back({text.substr(begin, pos - begin), piece.at_origin && begin == 0});
        begin = pos;
      }
      if (begin < text.size()) out.push_back({text.substr(begin), piece.at_origin && begin == 0});
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->apply(pieces);
  }
  bool byte_level() const override { return !steps_.empty() && steps_.back()->byte_level(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

std::string field(const JsonAt& spec, std::string_view key) {
  return spec.source() + ": field '" + spec.path() + "." + std::string(key) + "'";
}

std::unique_ptr<PreTokenizer> parse_metaspace(const JsonAt& spec) {
  std::string replacement = spec.str("replacement", "\xE2\x96\x81");
  if (replacement.empty() || replacement.find(' ') != std::string::npos) {
    spec.at("replacement").fail("expected one non-space character");
  }
  PrependScheme scheme = PrependScheme::kAlways;
  if (spec.has("prepend_scheme")) {
    std::string name = spec.at("prepend_scheme").str();
    if (name == "first") scheme = PrependScheme::kFirst;
    else if (name == "always") scheme = PrependScheme::kAlways;
    else if (name == "never") scheme = PrependScheme::kNever;
    else spec.at("prepend_scheme").fail("unknown prepend_scheme '" + name + "'");
  } else if (spec.has("add_prefix_space")) {  // before tokenizers 0.19
    scheme = spec.at("add_prefix_space").boolean() ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, spec.boolean("split", true));
}

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const JsonAt& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.type();
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(spec.boolean("add_prefix_space", true),
                                                   spec.boolean("use_regex", true), field(spec, "type"));
  }
  if (type == "Metaspace") return parse_metaspace(spec);
  if (type == "Split") {
    SplitBehavior behavior;
    std::string name = spec.at("behavior").str();
    if (!parse_split_behavior(name, &behavior)) spec.at("behavior").fail("unknown split behavior '" + name + "'");
    return std::make_unique<SplitPreTokenizer>(parse_pattern(spec.at("pattern")), behavior,
                                               spec.boolean("invert", false));
  }
  if (type == "Digits") {
    const bool individual = spec.boolean("individual_digits", false);
    // HF's Digits splits on Rust's char::is_numeric: general categories Nd, Nl and No, i.e.
    // \p{N} ("٣", "Ⅷ", "½", "²" too), not only ASCII 0-9.
    return std::make_unique<SplitPreTokenizer>(
        std::make_unique<Regex>(individual ? R"(\p{N})" : R"(\p{N}+)", false, field(spec, "type")),
        individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false);
  }
  if (type == "Whitespace") {
    return std::make_unique<SplitPreTokenizer>(std::make_unique<Regex>(R"(\w+|[^\w\s]+)", false, field(spec, "type")),
                                               SplitBehavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<SplitPreTokenizer>(std::make_unique<Regex>(R"(\s+)", false, field(spec, "type")),
                                               SplitBehavior::kRemoved, false);
  }
  if (type == "Sequence") {
    JsonAt list = spec.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      JsonAt item = list.at(i);
      if (item.is_null()) item.fail("expected a pre-tokenizer");
      if (!steps.empty() && steps.back()->byte_level()) {
        // Later steps would see GPT-2's byte alphabet, which skim never materializes.
        item.fail("a pre-tokenizer after ByteLevel is not supported");
      }
      steps.push_back(parse_pre_tokenizer(item));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  spec.at("type").fail("unknown pre-tokenizer type '" + type + "'");
}

}  // namespace skim::tok
