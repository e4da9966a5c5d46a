#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "core/error.h"

namespace skim {

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kChatML: return "chatml";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kMistral: return "mistral";
    case ChatFormat::kNone: break;
  }
  return "none";
}

ChatFormat chat_format_of_template(const std::string& t, const std::string& source) {
  if (t.find("<|im_start|>") != std::string::npos) return ChatFormat::kChatML;
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatFormat::kLlama3;
  if (t.find("[INST]") != std::string::npos) return ChatFormat::kMistral;
  fail("{}: chat_template is of a format skim does not know (it renders ChatML, Llama 3 and "
       "Mistral [INST] templates); use /v1/completions with your own prompt",
       source);
}

ChatFormat detect_chat_format(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "tokenizer_config.json";
  std::ifstream f(path);
  if (!f) return ChatFormat::kNone;
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  SKIM_REQUIRE(!j.is_discarded(), "{}: not valid JSON", path.string());
  if (!j.contains("chat_template") || j["chat_template"].is_null()) return ChatFormat::kNone;
  const nlohmann::json& t = j["chat_template"];
  if (t.is_string()) return chat_format_of_template(t.get<std::string>(), path.string());
  // A list of named templates: the "default" one.
  SKIM_REQUIRE(t.is_array(), "{}: chat_template must be a string or a list", path.string());
  for (const auto& e : t)
    if (e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
      return chat_format_of_template(e["template"].get<std::string>(), path.string());
  fail("{}: chat_template list has no 'default' entry", path.string());
}

namespace {

void require_role(const ChatMessage& m) {
  SKIM_REQUIRE(m.role == "system" || m.role == "user" || m.role == "assistant",
               "messages: role must be system, user or assistant, got '{}'", m.role);
}

std::string render_mistral(const std::vector<ChatMessage>& messages) {
  // The system message, if any, goes before the first user turn, as Mistral's template does.
  std::string system, out;
  size_t i = 0;
  if (!messages.empty() && messages[0].role == "system") system = messages[i++].content;
  bool expect_user = true;
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    SKIM_REQUIRE(m.role == (expect_user ? "user" : "assistant"),
                 "messages: this model's chat format needs user and assistant turns alternating "
                 "(after an optional first system message); message {} is '{}'",
                 i, m.role);
    if (expect_user) {
      out += "[INST] ";
      if (!system.empty()) {
        out += system + "\n\n";
        system.clear();
      }
      out += m.content + " [/INST]";
    } else {
      out += m.content + "</s>";
    }
    expect_user = !expect_user;
  }
  SKIM_REQUIRE(!expect_user, "messages: the last message must be the user's");
  return out;
}

}  // namespace

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages) {
  SKIM_REQUIRE(!messages.empty(), "messages: empty conversation");
  for (const ChatMessage& m : messages) require_role(m);
  std::string out;
  switch (format) {
    case ChatFormat::kChatML:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case ChatFormat::kLlama3:
      for (const ChatMessage& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::kMistral:
      return render_mistral(messages);
    case ChatFormat::kNone:
      break;
  }
  fail("this model has no chat template (tokenizer_config.json chat_template): use /v1/completions");
}

}  // namespace skim
