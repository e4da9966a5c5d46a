// libFuzzer target for the server's request parser: bytes as an HTTP body, through the JSON
// parse (depth-bounded) and parse_request for both endpoints, then the chat-template rendering
// and tokenisation it triggers. Only RequestError (a 4xx) or skim::Error may come out; the
// first byte picks the endpoint and whether the model has a chat template.
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace {

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
  m.chat = data[0] & 2 ? skim::ChatFormat::kChatML : skim::ChatFormat::kNone;
  const Endpoint endpoint = data[0] & 1 ? Endpoint::kChat : Endpoint::kCompletions;
  try {
    const nlohmann::json body = parse_body(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    const ParsedRequest r = parse_request(body, endpoint, m);
    if (r.request.prompt_ids.empty() || int(r.request.prompt_ids.size()) >= m.max_context) __builtin_trap();
  } catch (const RequestError&) {
  } catch (const skim::Error&) {
  }
  return 0;
}
