// Chat prompts for /v1/chat/completions. A Hugging Face model carries its chat format as a
// Jinja template (tokenizer_config.json "chat_template"); skim does not run Jinja: it
// recognises the three formats its model families use by their marker tokens and renders
// them itself. A template it does not recognise, or none, is an error naming the file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace skim {

enum class ChatFormat {
  kNone,     // no chat template: completions only
  kChatML,   // Qwen2/2.5/3: <|im_start|>role\ncontent<|im_end|>\n
  kLlama3,   // Llama 3/3.1: <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  kMistral,  // Mistral/Llama 2: [INST] user [/INST] assistant</s>
};

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

// Reads tokenizer_config.json in model_dir (absent: kNone). Throws skim::Error when it has a
// chat_template of no known format.
ChatFormat detect_chat_format(const std::filesystem::path& model_dir);
ChatFormat chat_format_of_template(const std::string& jinja, const std::string& source);

// The prompt for the assistant's next message (the BOS, when the model uses one, comes from
// the tokenizer's encode_prompt). Throws skim::Error on an unknown role or (Mistral) a
// conversation that does not alternate user/assistant.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages);

const char* chat_format_name(ChatFormat format);

}  // namespace skim
