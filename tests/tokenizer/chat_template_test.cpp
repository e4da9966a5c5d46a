// Chat formats: recognised from the marker tokens of a Hugging Face chat_template, rendered
// as the model families' templates render them; unknown templates and bad conversations
// are errors that say what to do.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace skim {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "2+2?"}};

TEST(ChatTemplate, RecognisesTheFamiliesByTheirMarkers) {
  EXPECT_EQ(chat_format_of_template("{% for m in messages %}<|im_start|>{{ m.role }}...", "t"), ChatFormat::kChatML);
  EXPECT_EQ(chat_format_of_template("{{ '<|start_header_id|>' + message['role'] }}", "t"), ChatFormat::kLlama3);
  EXPECT_EQ(chat_format_of_template("{{ '[INST] ' + message['content'] + ' [/INST]' }}", "t"), ChatFormat::kMistral);
  try {
    chat_format_of_template("{{ '### Human: ' + content }}", "dir/tokenizer_config.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dir/tokenizer_config.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("/v1/completions"), std::string::npos);
  }
}

TEST(ChatTemplate, RendersChatML) {
  EXPECT_EQ(render_chat(ChatFormat::kChatML, kConversation),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, RendersLlama3) {
  EXPECT_EQ(render_chat(ChatFormat::kLlama3, {{"user", "Hi"}}),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, RendersMistralWithTheSystemMessageInTheFirstTurn) {
  EXPECT_EQ(render_chat(ChatFormat::kMistral, kConversation),
            "[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] 2+2? [/INST]");
  EXPECT_THROW(render_chat(ChatFormat::kMistral, {{"user", "a"}, {"user", "b"}}), Error);
  EXPECT_THROW(render_chat(ChatFormat::kMistral, {{"user", "a"}, {"assistant", "b"}}), Error);
}

TEST(ChatTemplate, RefusesUnknownRolesAndModelsWithoutTemplate) {
  EXPECT_THROW(render_chat(ChatFormat::kChatML, {{"tool", "x"}}), Error);
  EXPECT_THROW(render_chat(ChatFormat::kChatML, {}), Error);
  EXPECT_THROW(render_chat(ChatFormat::kNone, {{"user", "x"}}), Error);
}

TEST(ChatTemplate, DetectsFromTokenizerConfig) {
  const auto dir = std::filesystem::temp_directory_path() / "skim_chat_template_test";
  std::filesystem::create_directories(dir);
  EXPECT_EQ(detect_chat_format(dir), ChatFormat::kNone);  // no tokenizer_config.json
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "<|im_start|>{{ role }}"})";
  EXPECT_EQ(detect_chat_format(dir), ChatFormat::kChatML);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "[INST]"}]})";
  EXPECT_EQ(detect_chat_format(dir), ChatFormat::kMistral);
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>"})";
  EXPECT_EQ(detect_chat_format(dir), ChatFormat::kNone);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace skim
