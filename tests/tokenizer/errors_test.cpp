// What tokenizer.json cannot be used for says so, naming the file and the field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture_paths.h"
#include "tokenizer/tokenizer.h"

namespace skim {
namespace {

// The message of the skim::Error that parsing throws.
std::string parse_error(const std::string& json_text) {
  try {
    parse_tokenizer(json_text, "bad/tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

nlohmann::json small_tokenizer() {
  return nlohmann::json::parse(test::read_text_file(test::tokenizer_fixture("llama3-style.tokenizer.json")));
}

std::string spec_error(const nlohmann::json& spec) { return parse_error(spec.dump()); }

TEST(TokenizerErrors, MissingFile) {
  try {
    load_tokenizer("/nonexistent/tokenizer.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}

TEST(TokenizerErrors, MalformedJson) {
  std::string message = parse_error("{\"model\": {");
  EXPECT_NE(message.find("bad/tokenizer.json: invalid JSON"), std::string::npos) << message;
  EXPECT_NE(parse_error("[1, 2]").find("expected a JSON object"), std::string::npos);
}

TEST(TokenizerErrors, MissingModel) {
  nlohmann::json spec = small_tokenizer();
  spec.erase("model");
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model' is missing");
}

TEST(TokenizerErrors, UnknownModelType) {
  nlohmann::json spec = small_tokenizer();
  spec["model"]["type"] = "Unigram";
  EXPECT_EQ(spec_error(spec),
            "bad/tokenizer.json: field 'model.type': unknown model type 'Unigram' (skim reads BPE models)");
}

TEST(TokenizerErrors, MalformedMerges) {
  nlohmann::json spec = small_tokenizer();
  spec["model"]["merges"][3] = "nospace";
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.merges[3]': expected \"left right\" with one space");
  spec["model"]["merges"][3] = nlohmann::json::array({"a", "b", "c"});
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.merges[3]': expected a pair [\"left\", \"right\"]");
  spec["model"]["merges"][3] = 7;
  EXPECT_NE(spec_error(spec).find("field 'model.merges[3]'"), std::string::npos);
  spec["model"]["merges"][3] = "zzzq qqqz";
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.merges[3]': merge of tokens not in the vocabulary");
  spec["model"]["merges"] = "not a list";
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.merges': expected an array");
}

TEST(TokenizerErrors, UnknownComponents) {
  nlohmann::json spec = small_tokenizer();
  spec["pre_tokenizer"]["pretokenizers"][0]["type"] = "BertPreTokenizer";
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'pre_tokenizer.pretokenizers[0].type': unknown "
                               "pre-tokenizer type 'BertPreTokenizer'");
  spec = small_tokenizer();
  spec["normalizer"] = {{"type", "Precompiled"}};
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'normalizer.type': unknown normalizer type 'Precompiled'");
  spec = small_tokenizer();
  spec["decoder"] = {{"type", "WordPiece"}};
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'decoder.type': unknown decoder type 'WordPiece'");
  spec = small_tokenizer();
  spec["post_processor"] = {{"type", "Fancy"}};
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'post_processor.type': unknown post-processor type 'Fancy'");
  spec = small_tokenizer();
  spec["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  EXPECT_NE(spec_error(spec).find("unknown split behavior 'Sideways'"), std::string::npos);
}

TEST(TokenizerErrors, BadRegex) {
  nlohmann::json spec = small_tokenizer();
  spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  std::string message = spec_error(spec);
  EXPECT_NE(message.find("bad/tokenizer.json: field 'pre_tokenizer.pretokenizers[0].pattern.Regex': regex does "
                         "not compile"),
            std::string::npos)
      << message;
}

TEST(TokenizerErrors, PreTokenizerAfterByteLevel) {
  nlohmann::json spec = small_tokenizer();
  auto& list = spec["pre_tokenizer"]["pretokenizers"];
  list.push_back(list[0]);
  EXPECT_NE(spec_error(spec).find("a pre-tokenizer after ByteLevel is not supported"), std::string::npos);
}

TEST(TokenizerErrors, UnsupportedModelOptions) {
  nlohmann::json spec = small_tokenizer();
  spec["model"]["dropout"] = 0.1;
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.dropout': BPE dropout is not supported");
  spec = small_tokenizer();
  spec["model"]["end_of_word_suffix"] = "</w>";
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.end_of_word_suffix': not supported");
  spec = small_tokenizer();
  spec["model"]["unk_token"] = "<nope>";
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.unk_token': '<nope>' is not in the vocabulary");
}

TEST(TokenizerErrors, BadFieldTypesAndIds) {
  nlohmann::json spec = small_tokenizer();
  spec["model"]["vocab"]["hello"] = "seven";
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.vocab.hello': expected an integer");
  spec = small_tokenizer();
  spec["model"]["vocab"]["hello"] = 1 << 30;
  EXPECT_NE(spec_error(spec).find("out of range"), std::string::npos);
  spec = small_tokenizer();
  spec["added_tokens"][0]["content"] = 5;
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'added_tokens[0].content': expected a string");
  spec = small_tokenizer();
  spec["model"]["byte_fallback"] = "yes";
  EXPECT_EQ(spec_error(spec), "bad/tokenizer.json: field 'model.byte_fallback': expected true or false");
  spec = small_tokenizer();
  spec["post_processor"]["processors"][1]["single"][0]["SpecialToken"]["id"] = "<missing>";
  EXPECT_NE(spec_error(spec).find("special token '<missing>' is not in special_tokens"), std::string::npos);
}

TEST(TokenizerErrors, DeeplyNestedComponentsAreRejectedNotRecursedInto) {
  // Built as text: nlohmann's dump() itself recurses.
  std::string nested;
  for (int i = 0; i < 100000; ++i) nested += R"({"type":"Sequence","normalizers":[)";
  nested += R"({"type":"NFC"})";
  for (int i = 0; i < 100000; ++i) nested += "]}";
  std::string text = small_tokenizer().dump();
  const std::string key = "\"normalizer\":null";
  ASSERT_NE(text.find(key), std::string::npos);
  text.replace(text.find(key), key.size(), "\"normalizer\":" + nested);
  EXPECT_EQ(parse_error(text), "bad/tokenizer.json: field 'normalizer': nested more than 64 levels deep");
}

TEST(TokenizerErrors, MergesAsStringsReadTheSame) {
  nlohmann::json spec = small_tokenizer();
  for (auto& merge : spec["model"]["merges"]) merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  auto as_strings = parse_tokenizer(spec.dump(), "strings");
  auto as_pairs = load_tokenizer(test::tokenizer_fixture("llama3-style.tokenizer.json"));
  const std::string text = test::read_text_file(test::repo_path("data/heldout-python/http.py.txt")).substr(0, 20000);
  EXPECT_EQ(as_strings->encode(text), as_pairs->encode(text));
}

}  // namespace
}  // namespace skim
