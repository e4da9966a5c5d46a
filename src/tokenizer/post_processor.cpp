#include "tokenizer/post_processor.h"

namespace skim::tok {

namespace {

void append_special(const JsonAt& special_tokens, const JsonAt& item, std::vector<int>& out) {
  const std::string name = item.at("id").str();
  if (!special_tokens.has(name)) item.at("id").fail("special token '" + name + "' is not in special_tokens");
  JsonAt ids = special_tokens.at(name).at("ids");
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids.at(i).integer();
    if (id < 0 || id > INT32_MAX) ids.at(i).fail("expected a token id");
    out.push_back(static_cast<int>(id));
  }
}

void parse_template(const JsonAt& spec, PromptTemplate& result) {
  JsonAt single = spec.at("single");
  JsonAt special_tokens = spec.get_or_null("special_tokens");
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    JsonAt item = single.at(i);
    if (item.has("SpecialToken")) {
      append_special(special_tokens, item.at("SpecialToken"), seen_sequence ? result.suffix : result.prefix);
    } else if (item.has("Sequence")) {
      if (seen_sequence) item.fail("a single-sequence template holds one sequence");
      seen_sequence = true;
    } else {
      item.fail("expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!seen_sequence) single.fail("the template has no sequence");
}

// ["<s>", 0] pairs of Roberta/Bert processors.
int pair_id(const JsonAt& pair) {
  const int64_t id = pair.at(1).integer();
  if (id < 0 || id > INT32_MAX) pair.at(1).fail("expected a token id");
  return static_cast<int>(id);
}

void parse_into(const JsonAt& spec, PromptTemplate& result) {
  if (spec.is_null()) return;
  const std::string type = spec.type();
  if (type == "ByteLevel") return;  // only trims offsets
  // Each processor wraps what the previous ones produced.
  PromptTemplate wrap;
  if (type == "TemplateProcessing") {
    parse_template(spec, wrap);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    wrap.prefix.push_back(pair_id(spec.at("cls")));
    wrap.suffix.push_back(pair_id(spec.at("sep")));
  }
  if (!wrap.prefix.empty() || !wrap.suffix.empty() || type == "TemplateProcessing" ||
      type == "RobertaProcessing" || type == "BertProcessing") {
    result.prefix.insert(result.prefix.begin(), wrap.prefix.begin(), wrap.prefix.end());
    result.suffix.insert(result.suffix.end(), wrap.suffix.begin(), wrap.suffix.end());
    return;
  }
  if (type == "Sequence") {
    JsonAt list = spec.at("processors");
    for (size_t i = 0; i < list.size(); ++i) parse_into(list.at(i), result);
    return;
  }
  spec.at("type").fail("unknown post-processor type '" + type + "'");
}

}  // namespace

PromptTemplate parse_post_processor(const JsonAt& spec) {
  PromptTemplate result;
  parse_into(spec, result);
  return result;
}

}  // namespace skim::tok
