// libFuzzer target for the chat-template interpreter (src/tokenizer/jinja). The input is a
// template source, then optionally a NUL byte and the messages as JSON (a fixed conversation
// when they do not parse). Parsing and rendering may fail only with skim::Error, within the
// limits (steps, sizes, depth): no crash, no hang, no other exception.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/jinja/template.h"

namespace {

nlohmann::ordered_json messages_of(const std::string& text) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!j.is_discarded() && j.is_array()) return j;
  return nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi \u00e9"}, {"type": "image"}]},
    {"role": "assistant", "content": "Hello", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1.5}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": "and?"}])");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  const std::string messages = nul == std::string::npos ? "" : input.substr(nul + 1);
  skim::jinja::Limits limits;
  limits.max_steps = 200000;
  limits.max_size = 1 << 20;
  try {
    const skim::jinja::Template t(source, "fuzz.jinja", limits);
    skim::jinja::Dict vars;
    vars.set("messages", skim::jinja::from_json(messages_of(messages)));
    vars.set("tools", skim::jinja::from_json(nlohmann::ordered_json::parse(
                          R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])")));
    vars.set("add_generation_prompt", skim::jinja::Value(true));
    vars.set("bos_token", skim::jinja::Value("<s>"));
    vars.set("eos_token", skim::jinja::Value("</s>"));
    t.render(vars);
  } catch (const skim::Error&) {
  }
  return 0;
}
