// Reads tokenizer.json into the parts of an HfTokenizer; every field it cannot use is an
// error naming the file and the field.
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/utf8.h"

namespace skim {

namespace {

using tok::JsonAt;

// Ids are dense in real tokenizers; the bound keeps a hostile file from allocating gigabytes.
int checked_id(const JsonAt& value, size_t entries) {
  const int64_t id = value.integer();
  const int64_t limit = static_cast<int64_t>(entries) * 4 + 65536;
  if (id < 0 || id >= limit) value.fail("token id " + std::to_string(id) + " out of range");
  return static_cast<int>(id);
}

void check_valid_utf8(const JsonAt& where, const std::string& text) {
  if (!tok::utf8_valid(text)) where.fail("text is not valid UTF-8");
}

std::vector<std::pair<std::string, std::string>> parse_merges(const JsonAt& merges) {
  std::vector<std::pair<std::string, std::string>> result;
  result.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    JsonAt merge = merges.at(i);
    if (merge.value().is_string()) {
      // "a b": exactly one space separates the two parts.
      const std::string line = merge.str();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        merge.fail("expected \"left right\" with one space");
      }
      result.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (merge.value().is_array()) {
      if (merge.size() != 2) merge.fail("expected a pair [\"left\", \"right\"]");
      result.emplace_back(merge.at(size_t{0}).str(), merge.at(size_t{1}).str());
    } else {
      merge.fail("expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  return result;
}

void check_unsupported(const JsonAt& model) {
  if (model.has("dropout")) {
    const auto& dropout = model.at("dropout").value();
    if (!dropout.is_number() || dropout.get<double>() != 0.0) model.at("dropout").fail("BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.has(key) && !model.at(key).str().empty()) model.at(key).fail("not supported");
  }
}

// Fills the vocabulary and the BPE model.
void parse_model(const JsonAt& model, bool byte_level, tok::TokenizerParts& parts) {
  const std::string type = model.str("type", "");
  if (type.empty()) model.at("type");  // names the missing field
  if (type != "BPE") model.at("type").fail("unknown model type '" + type + "' (skim reads BPE models)");
  check_unsupported(model);

  JsonAt vocab = model.at("vocab");
  if (!vocab.value().is_object()) vocab.fail("expected an object of token -> id");
  std::unordered_map<std::string, int> symbols;  // in the model's symbol space
  symbols.reserve(vocab.value().size());
  std::string bytes;
  for (const auto& [token, value] : vocab.value().items()) {
    JsonAt entry(value, vocab.source(), vocab.path() + "." + token);
    check_valid_utf8(entry, token);
    const int id = checked_id(entry, vocab.value().size());
    if (static_cast<size_t>(id) >= parts.token_text.size()) parts.token_text.resize(id + 1);
    parts.token_text[id] = token;
    parts.token_ids.emplace(token, id);
    if (!byte_level) {
      symbols.emplace(token, id);
    } else if (tok::byte_level_to_bytes(token, bytes)) {
      symbols.emplace(bytes, id);
    }
    // A byte-level token outside the byte alphabet can never come out of BPE; it keeps its id.
  }

  auto merges = parse_merges(model.at("merges"));
  if (byte_level) {
    for (size_t i = 0; i < merges.size(); ++i) {
      auto& [left, right] = merges[i];
      std::string left_bytes, right_bytes;
      if (!tok::byte_level_to_bytes(left, left_bytes) || !tok::byte_level_to_bytes(right, right_bytes)) {
        model.at("merges").at(i).fail("merge outside the byte-level alphabet");
      }
      left = std::move(left_bytes);
      right = std::move(right_bytes);
    }
  }

  tok::BpeOptions options;
  options.byte_level = byte_level;
  options.byte_fallback = model.boolean("byte_fallback", false);
  options.ignore_merges = model.boolean("ignore_merges", false);
  options.fuse_unk = model.boolean("fuse_unk", false);
  if (model.has("unk_token")) {
    const std::string unk = model.at("unk_token").str();
    auto it = parts.token_ids.find(unk);
    if (it == parts.token_ids.end()) model.at("unk_token").fail("'" + unk + "' is not in the vocabulary");
    options.unk_id = it->second;
  }
  parts.model = std::make_unique<tok::BpeModel>(std::move(symbols), merges, options, vocab.source());
}

void parse_added_tokens(const JsonAt& list, size_t vocab_entries, tok::TokenizerParts& parts) {
  if (list.is_null()) return;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonAt item = list.at(i);
    tok::AddedToken token;
    token.id = checked_id(item.at("id"), vocab_entries + list.size());
    token.content = item.at("content").str();
    check_valid_utf8(item.at("content"), token.content);
    token.special = item.boolean("special", false);
    token.lstrip = item.boolean("lstrip", false);
    token.rstrip = item.boolean("rstrip", false);
    token.single_word = item.boolean("single_word", false);
    token.normalized = item.boolean("normalized", !token.special);
    if (static_cast<size_t>(token.id) >= parts.token_text.size()) parts.token_text.resize(token.id + 1);
    parts.token_text[token.id] = token.content;
    parts.token_ids[token.content] = token.id;
    parts.added.push_back(std::move(token));
  }
}

// Components nest (Sequence of Sequence ...) and are read recursively: bound the depth so a
// hostile file cannot overflow the stack. Real files nest three or four levels.
constexpr size_t kMaxComponentDepth = 64;

bool nested_deeper_than(const nlohmann::json& value, size_t limit) {
  std::vector<std::pair<const nlohmann::json*, size_t>> stack{{&value, 0}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (depth > limit) return true;
    if (node->is_structured()) {
      for (const auto& child : *node) stack.emplace_back(&child, depth + 1);
    }
  }
  return false;
}

std::unique_ptr<Tokenizer> build(const nlohmann::json& root, const std::string& source) {
  JsonAt spec(root, source, "");
  if (!root.is_object()) spec.fail("expected a JSON object");
  for (const char* component : {"normalizer", "pre_tokenizer", "decoder", "post_processor"}) {
    if (nested_deeper_than(spec.get_or_null(component).value(), kMaxComponentDepth)) {
      spec.at(component).fail("nested more than " + std::to_string(kMaxComponentDepth) + " levels deep");
    }
  }
  tok::TokenizerParts parts;
  parts.normalizer = tok::parse_normalizer(spec.get_or_null("normalizer"));
  parts.pre_tokenizer = tok::parse_pre_tokenizer(spec.get_or_null("pre_tokenizer"));
  const bool byte_level = parts.pre_tokenizer && parts.pre_tokenizer->byte_level();
  JsonAt model = spec.at("model");
  if (model.is_null()) model.fail("no model");
  parse_model(model, byte_level, parts);
  parse_added_tokens(spec.get_or_null("added_tokens"), parts.token_text.size(), parts);
  parts.decoder = tok::parse_decoder(spec.get_or_null("decoder"));
  parts.prompt = tok::parse_post_processor(spec.get_or_null("post_processor"));
  for (int id : parts.prompt.prefix) {
    if (static_cast<size_t>(id) >= parts.token_text.size()) spec.at("post_processor").fail("token id " + std::to_string(id) + " is not in the vocabulary");
  }
  for (int id : parts.prompt.suffix) {
    if (static_cast<size_t>(id) >= parts.token_text.size()) spec.at("post_processor").fail("token id " + std::to_string(id) + " is not in the vocabulary");
  }
  return std::make_unique<tok::HfTokenizer>(std::move(parts));
}

}  // namespace

std::unique_ptr<Tokenizer> parse_tokenizer(const std::string& json_text, const std::string& source) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", source, e.what());
  }
  try {
    return build(root, source);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unusable tokenizer.json: {}", source, e.what());  // a field of an unexpected type
  }
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& tokenizer_json) {
  std::ifstream file(tokenizer_json, std::ios::binary);
  if (!file) fail("{}: cannot open the tokenizer file", tokenizer_json.string());
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) fail("{}: cannot read the tokenizer file", tokenizer_json.string());
  return parse_tokenizer(text.str(), tokenizer_json.string());
}

}  // namespace skim
