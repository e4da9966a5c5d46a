// Chat prompts: the model's own Jinja chat template, rendered as transformers'
// apply_chat_template renders it (src/tokenizer/jinja). The template comes, in transformers'
// order, from chat_template.jinja in the model directory, else tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template}: "default", and "tool_use" when
// tools are given); or from a file the user names (--chat-template). The special tokens'
// strings (bos_token, eos_token, ...) come from tokenizer_config.json.
//
// The rendered text carries the BOS itself when the template writes {{ bos_token }}:
// tokenize it with Tokenizer::encode (no post-processor BOS), as transformers does with
// add_special_tokens=False.
#pragma once

#include <nlohmann/json.hpp>

#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace skim {

namespace jinja {
class Template;
}

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  nlohmann::ordered_json tools;      // null: none (the template sees None)
  nlohmann::ordered_json documents;  // null: none
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more variables (enable_thinking, ...)
  bool add_generation_prompt = true;
  std::optional<std::tm> now;  // what strftime_now formats (unset: the local time now)
};

class ChatTemplate {
 public:
  // nullopt when the directory has no chat template. Throws skim::Error naming the file on a
  // template that does not parse or a malformed tokenizer_config.json.
  static std::optional<ChatTemplate> from_model_dir(const std::filesystem::path& dir);
  // A template file of the user's; special tokens still come from model_dir.
  static ChatTemplate from_file(const std::filesystem::path& file, const std::filesystem::path& model_dir);
  // A template given as text; `special_tokens` an object of name -> string.
  ChatTemplate(const std::string& text, const std::string& source,
               nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object(),
               const std::string& tool_use_text = "");

  // Throws skim::Error "source:line: message" (raise_exception's message included).
  std::string render(const ChatTemplateInputs& in) const;
  const std::string& source() const { return source_; }

 private:
  std::string render_inputs(const ChatTemplateInputs& in) const;

  std::string source_;
  std::shared_ptr<const jinja::Template> default_, tool_use_;
  nlohmann::ordered_json special_tokens_;
};

}  // namespace skim
