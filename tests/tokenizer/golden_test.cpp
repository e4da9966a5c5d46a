// Token ids and decoded text against Hugging Face tokenizers, from the fixtures written by
// scripts/fixtures/make_tokenizer_fixtures.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../real_model.h"
#include "fixture_paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace skim {
namespace {

struct GoldenCase {
  std::string name;
  std::string input;  // raw bytes, possibly invalid UTF-8
  bool valid;
  std::vector<int> ids, prompt_ids, plain_ids;
  std::string decoded;
};

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

struct Golden {
  std::string tokenizer_path;
  std::vector<GoldenCase> cases;
};

Golden load_golden(const std::string& name) {
  auto doc = nlohmann::json::parse(test::read_text_file(test::tokenizer_fixture(name + ".golden.json")));
  Golden golden;
  const std::string file = doc["tokenizer"];
  golden.tokenizer_path = file.find('/') == std::string::npos ? test::tokenizer_fixture(file).string()
                                                              : test::repo_path(file).string();
  for (const auto& c : doc["cases"]) {
    GoldenCase g;
    g.name = c["name"];
    g.valid = c.contains("text");
    g.input = g.valid ? c["text"].get<std::string>() : from_hex(c["hex"]);
    g.ids = c["ids"].get<std::vector<int>>();
    g.prompt_ids = c["prompt_ids"].get<std::vector<int>>();
    g.plain_ids = c["plain_ids"].get<std::vector<int>>();
    g.decoded = c["decoded"];
    golden.cases.push_back(std::move(g));
  }
  return golden;
}

void expect_encode_matches(const std::string& name) {
  Golden golden = load_golden(name);
  auto tok = load_tokenizer(golden.tokenizer_path);
  ASSERT_GT(golden.cases.size(), 20u);
  for (const GoldenCase& c : golden.cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(tok->encode(c.input, true), c.ids);
    EXPECT_EQ(tok->encode_prompt(c.input), c.prompt_ids);
    EXPECT_EQ(tok->encode(c.input, false), c.plain_ids);
  }
}

void expect_decode_matches(const std::string& name) {
  Golden golden = load_golden(name);
  auto tok = load_tokenizer(golden.tokenizer_path);
  for (const GoldenCase& c : golden.cases) {
    SCOPED_TRACE(c.name);
    // Hugging Face returns text with U+FFFD; skim returns the bytes, valid here.
    EXPECT_EQ(tok::utf8_replace_invalid(tok->decode(c.ids)), c.decoded);
  }
}

class GoldenTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTokenizer, EncodeMatchesHuggingFace) { expect_encode_matches(GetParam()); }

TEST_P(GoldenTokenizer, DecodeMatchesHuggingFace) { expect_decode_matches(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTokenizer,
                         ::testing::Values("demo", "llama3-style", "qwen2-style", "gpt2-style", "llama2-style",
                                           "mistral-style"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// The real model's tokenizer (models/smollm2-135m-instruct/tokenizer.json, built from GGUF
// metadata by scripts/models/smollm2.sh): digits split one by one, then GPT-2's byte-level split.
TEST(GoldenTokenizer, SmolLM2EncodeMatchesHuggingFace) {
  SKIM_REQUIRE_SMOLLM2();
  expect_encode_matches("smollm2");
}

TEST(GoldenTokenizer, SmolLM2DecodeMatchesHuggingFace) {
  SKIM_REQUIRE_SMOLLM2();
  expect_decode_matches("smollm2");
}

// The demo tokenizer is byte-level with no normalizer: decoding gives back the exact text.
TEST(GoldenTokenizer, DemoRoundTripsValidText) {
  Golden golden = load_golden("demo");
  auto tok = load_tokenizer(golden.tokenizer_path);
  for (const GoldenCase& c : golden.cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(tok->decode(tok->encode(c.input, true)), tok::utf8_replace_invalid(c.input));
    EXPECT_EQ(tok->decode(tok->encode(c.input, false)), tok::utf8_replace_invalid(c.input));
  }
}

}  // namespace
}  // namespace skim
