// libFuzzer target for the server's request parser: bytes as an HTTP body, through the JSON
// parse (depth-bounded) and parse_request for both endpoints, then the chat-template rendering
// and tokenisation it triggers. Only RequestError (a 4xx) or skim::Error may come out; the
// first byte picks the endpoint and whether the model has a chat template.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "server/openai_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

// A ChatML template with a default system turn, as SmolLM2's and Qwen2.5's.
std::shared_ptr<const skim::ChatTemplate> chatml() {
  static const auto t = std::make_shared<const skim::ChatTemplate>(
      "{% for m in messages %}{% if loop.first and m.role != 'system' %}<|im_start|>system\nYou are helpful.<|im_end|>\n"
      "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "fuzz-chatml");
  return t;
}

const skim::Tokenizer& demo_tokenizer() {
  static const auto tok =
      skim::load_tokenizer(std::filesystem::path(__FILE__).parent_path() / "../../models/demo-code-28m/tokenizer.json");
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using namespace skim::server;
  ServedModel m;
  m.name = "demo";
  m.tokenizer = &demo_tokenizer();
  m.max_context = 256;
  m.max_token_bytes = 64;
  if (data[0] & 2) m.chat = chatml();
  const Endpoint endpoint = data[0] & 1 ? Endpoint::kChat : Endpoint::kCompletions;
  try {
    const std::string raw(reinterpret_cast<const char*>(data + 1), size - 1);
    const nlohmann::json body = parse_body(raw);
    const ParsedRequest r = parse_request(body, endpoint, m, raw);
    if (r.request.prompt_ids.empty() || int(r.request.prompt_ids.size()) >= m.max_context) __builtin_trap();
  } catch (const RequestError&) {
  } catch (const skim::Error&) {
  }
  return 0;
}
