#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/jinja/template.h"

namespace skim {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  SKIM_REQUIRE(f.good(), "{}: cannot read", path.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

ojson read_config(const fs::path& dir) {
  const fs::path path = dir / "tokenizer_config.json";
  if (!fs::exists(path)) return ojson::object();
  ojson j = ojson::parse(read_file(path), nullptr, false);
  SKIM_REQUIRE(!j.is_discarded() && j.is_object(), "{}: not a JSON object", path.string());
  return j;
}

// transformers' special_tokens_map: the named special tokens as strings (a token may be
// written as {"content": ...}).
ojson special_tokens(const ojson& config) {
  ojson out = ojson::object();
  for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(k)) continue;
    const ojson& v = config[k];
    if (v.is_string()) out[k] = v;
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) out[k] = v["content"];
  }
  return out;
}

// A message's reasoning under the names templates read (transformers'
// _alias_reasoning_fields): "thinking" first, "reasoning_content" last.
ojson alias_reasoning(const ojson& messages) {
  if (!messages.is_array()) return messages;
  ojson out = ojson::array();
  for (const ojson& m : messages) {
    const ojson* r = nullptr;
    if (m.is_object())
      for (const char* k : {"reasoning_content", "thinking", "reasoning"})
        if (!r && m.contains(k) && !m[k].is_null()) r = &m[k];
    if (!r) {
      out.push_back(m);
      continue;
    }
    ojson a = ojson::object();
    a["thinking"] = *r;
    for (const auto& [k, v] : m.items()) a[k] = v;
    a["reasoning_content"] = *r;
    out.push_back(std::move(a));
  }
  return out;
}

jinja::Value strftime_now(const std::optional<std::tm>& fixed, const jinja::CallArgs& a) {
  const jinja::Value* f = a.get(0, "format");
  if (!f || !f->is_string()) jinja::render_fail("strftime_now needs a format string");
  std::tm tm{};
  if (fixed) {
    tm = *fixed;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, f->as_string().c_str(), &tm);
  return jinja::Value(std::string(buf, n));
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& text, const std::string& source, ojson special, const std::string& tool_use_text)
    : source_(source),
      default_(std::make_shared<const jinja::Template>(text, source)),
      special_tokens_(std::move(special)) {
  if (!tool_use_text.empty()) tool_use_ = std::make_shared<const jinja::Template>(tool_use_text, source + " (tool_use)");
}

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const fs::path& dir) {
  const ojson config = read_config(dir);
  const fs::path jinja_file = dir / "chat_template.jinja";
  const fs::path tool_file = dir / "additional_chat_templates" / "tool_use.jinja";
  const std::string tool_use = fs::exists(tool_file) ? read_file(tool_file) : "";
  if (fs::exists(jinja_file))
    return ChatTemplate(read_file(jinja_file), jinja_file.string(), special_tokens(config), tool_use);
  const std::string cfg = (dir / "tokenizer_config.json").string();
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return std::nullopt;
  const ojson& t = config["chat_template"];
  if (t.is_string()) return ChatTemplate(t.get<std::string>(), cfg, special_tokens(config), tool_use);
  SKIM_REQUIRE(t.is_array(), "{}: chat_template must be a string or a list of {{name, template}}", cfg);
  std::string named_default, named_tool;
  for (const ojson& e : t) {
    SKIM_REQUIRE(e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("template") &&
                     e["template"].is_string(),
                 "{}: each chat_template entry needs a string name and template", cfg);
    if (e["name"] == "default") named_default = e["template"].get<std::string>();
    if (e["name"] == "tool_use") named_tool = e["template"].get<std::string>();
  }
  SKIM_REQUIRE(!named_default.empty(), "{}: chat_template list has no 'default' entry", cfg);
  return ChatTemplate(named_default, cfg, special_tokens(config), named_tool.empty() ? tool_use : named_tool);
}

ChatTemplate ChatTemplate::from_file(const fs::path& file, const fs::path& model_dir) {
  return ChatTemplate(read_file(file), file.string(), special_tokens(read_config(model_dir)));
}

std::string ChatTemplate::render(const ChatTemplateInputs& in) const {
  try {
    return render_inputs(in);
  } catch (const jinja::RenderError& e) {  // inputs the template cannot be given
    fail("{}: {}", source_, e.what());
  }
}

std::string ChatTemplate::render_inputs(const ChatTemplateInputs& in) const {
  jinja::Dict vars;
  vars.set("messages", jinja::from_json(alias_reasoning(in.messages)));
  vars.set("tools", jinja::from_json(in.tools));
  vars.set("documents", jinja::from_json(in.documents));
  vars.set("add_generation_prompt", jinja::Value(in.add_generation_prompt));
  if (in.extra.is_object())
    for (const auto& [k, v] : in.extra.items()) vars.set(k, jinja::from_json(v));
  for (const auto& [k, v] : special_tokens_.items()) vars.set(k, jinja::from_json(v));
  const std::optional<std::tm> now = in.now;
  vars.set("strftime_now", jinja::Value(jinja::Function{"strftime_now", [now](jinja::CallArgs& a) { return strftime_now(now, a); }}));
  const bool tools = !in.tools.is_null();
  return (tools && tool_use_ ? *tool_use_ : *default_).render(vars);
}

}  // namespace skim
