// Chat templates against transformers: every template of tests/fixtures/chat_templates over
// every conversation renders the text and token ids that scripts/fixtures/
// make_chat_template_fixtures.py recorded with jinja2 in transformers' environment, and
// fails where it failed. Then template sources (model directory, --chat-template).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "fixture_paths.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace skim {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

fs::path chat_fixture(const std::string& name) { return test::repo_path("tests/fixtures/chat_templates/" + name); }

ojson read_json(const fs::path& p) { return ojson::parse(test::read_text_file(p)); }

// The fixture script's strftime_now time: 2026-07-26 12:00.
std::tm fixed_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_wday = 0;  // a Sunday
  tm.tm_yday = 206;
  return tm;
}

ChatTemplateInputs inputs_of(const ojson& c) {
  ChatTemplateInputs in;
  in.messages = c["messages"];
  if (c.contains("tools")) in.tools = c["tools"];
  if (c.contains("documents")) in.documents = c["documents"];
  if (c.contains("extra")) in.extra = c["extra"];
  in.add_generation_prompt = c.value("add_generation_prompt", true);
  in.now = fixed_now();
  return in;
}

TEST(ChatTemplate, MatchesTransformersOnEveryFixture) {
  const ojson cases = read_json(chat_fixture("cases.json"));
  const ojson expected = read_json(chat_fixture("expected.json"));
  const auto tok = load_tokenizer(test::demo_tokenizer_path());
  std::map<std::string, ojson> by_name;
  for (const ojson& c : cases["conversations"]) by_name[c["name"]] = c;
  int texts = 0, errors = 0;
  for (const ojson& e : expected) {
    const std::string name = e["template"].get<std::string>() + " / " + e["case"].get<std::string>();
    SCOPED_TRACE(name);
    const fs::path file = chat_fixture("templates/" + e["template"].get<std::string>());
    const ChatTemplate t(test::read_text_file(file), e["template"].get<std::string>(), cases["special_tokens"]);
    const ChatTemplateInputs in = inputs_of(by_name.at(e["case"]));
    if (e.contains("error")) {
      try {
        t.render(in);
        ADD_FAILURE() << "expected an error: " << e["error"];
      } catch (const Error& err) {
        if (e["error_type"] == "TemplateError") {  // raise_exception: the template's own message
          EXPECT_NE(std::string(err.what()).find(e["error"].get<std::string>()), std::string::npos) << err.what();
        }
        EXPECT_EQ(std::string(err.what()).rfind(e["template"].get<std::string>() + ":", 0), 0u) << err.what();
      }
      ++errors;
      continue;
    }
    std::string text;
    ASSERT_NO_THROW(text = t.render(in));
    EXPECT_EQ(text, e["text"].get<std::string>());
    EXPECT_EQ(tok->encode(text, true), e["ids"].get<std::vector<int>>());
    ++texts;
  }
  EXPECT_GT(texts, 50);
  EXPECT_GE(errors, 3);
}

// Small templates probing one corner each (printing, arithmetic, filters, methods, scoping,
// whitespace), as jinja2 renders them over the tool_calls conversation.
TEST(ChatTemplate, MatchesJinja2OnEverySnippet) {
  const ojson cases = read_json(chat_fixture("cases.json"));
  ojson conversation;
  for (const ojson& c : cases["conversations"])
    if (c["name"] == "tool_calls") conversation = c;
  int n = 0;
  for (const ojson& e : read_json(chat_fixture("expected_snippets.json"))) {
    const std::string snippet = e["snippet"];
    SCOPED_TRACE(snippet);
    ++n;
    try {
      const std::string text = ChatTemplate(snippet, "snippet", cases["special_tokens"]).render(inputs_of(conversation));
      if (e.contains("error")) ADD_FAILURE() << "expected " << e["error_type"] << ": " << e["error"] << "; got " << text;
      else EXPECT_EQ(text, e["text"].get<std::string>());
    } catch (const Error& err) {
      if (!e.contains("error")) {
        ADD_FAILURE() << err.what();
      } else if (e["error_type"] == "TemplateError") {
        EXPECT_NE(std::string(err.what()).find(e["error"].get<std::string>()), std::string::npos) << err.what();
      }
    }
  }
  EXPECT_GT(n, 60);
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("skim_chat_template_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

const char* kUser = R"([{"role": "user", "content": "hi"}])";

std::string render_dir(const fs::path& dir, bool tools = false) {
  auto t = ChatTemplate::from_model_dir(dir);
  if (!t) return "<none>";
  ChatTemplateInputs in;
  in.messages = ojson::parse(kUser);
  if (tools) in.tools = ojson::array();
  return t->source() + ": " + t->render(in);
}

TEST(ChatTemplate, SourcesInTransformersOrder) {
  TempDir d;
  EXPECT_EQ(render_dir(d.path), "<none>");
  d.write("tokenizer_config.json", R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})");
  EXPECT_EQ(render_dir(d.path), "<none>");
  d.write("tokenizer_config.json",
          R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"})");
  EXPECT_EQ(render_dir(d.path), (d.path / "tokenizer_config.json").string() + ": <s>hi</s>");
  d.write("tokenizer_config.json",
          R"({"chat_template": [{"name": "tool_use", "template": "T{{ tools | length }}"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(render_dir(d.path), (d.path / "tokenizer_config.json").string() + ": D");
  EXPECT_EQ(render_dir(d.path, true), (d.path / "tokenizer_config.json").string() + ": T0");
  d.write("chat_template.jinja", "J{{ messages | length }}\n");  // the file wins; its last newline is dropped
  EXPECT_EQ(render_dir(d.path), (d.path / "chat_template.jinja").string() + ": J1");
  d.write("t.jinja", "U{{ eos_token }}");
  d.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  const ChatTemplate user = ChatTemplate::from_file(d.path / "t.jinja", d.path);
  ChatTemplateInputs in;
  in.messages = ojson::parse(kUser);
  EXPECT_EQ(user.render(in), "U</s>");
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "x", "template": "D"}]})");
  fs::remove(d.path / "chat_template.jinja");
  EXPECT_THROW(ChatTemplate::from_model_dir(d.path), Error);
  d.write("chat_template.jinja", "{% for %}");
  try {
    ChatTemplate::from_model_dir(d.path);
    FAIL() << "expected a syntax error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chat_template.jinja:1:"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, ReasoningIsAliasedAsTransformersDoes) {
  const ChatTemplate t("{% for m in messages %}{{ m | tojson }}{% endfor %}", "t");
  ChatTemplateInputs in;
  in.messages = ojson::parse(R"([{"role": "assistant", "reasoning": "r", "content": "c"}])");
  EXPECT_EQ(t.render(in), R"({"thinking": "r", "role": "assistant", "reasoning": "r", "content": "c", "reasoning_content": "r"})");
}

TEST(ChatTemplate, StrftimeNowFormatsTheGivenTime) {
  const ChatTemplate t("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d') }}", "t");
  ChatTemplateInputs in;
  in.now = fixed_now();
  EXPECT_EQ(t.render(in), "26 Jul 2026|2026-07-26");
  in.now.reset();
  EXPECT_EQ(t.render(in).size(), std::string("26 Jul 2026|2026-07-26").size());
}

// SmolLM2-135M-Instruct's own directory (when present) renders as the fixture of its real
// template (smollm2_135m_instruct.jinja) does.
TEST(ChatTemplate, SmolLM2ModelDirectoryMatchesItsFixture) {
  const fs::path dir = test::repo_path("models/smollm2-135m-instruct");
  if (!fs::exists(dir / "tokenizer_config.json") && !fs::exists(dir / "chat_template.jinja"))
    GTEST_SKIP() << dir << " is not there";
  const auto t = ChatTemplate::from_model_dir(dir);
  ASSERT_TRUE(t.has_value());
  const ojson cases = read_json(chat_fixture("cases.json"));
  int checked = 0;
  for (const ojson& e : read_json(chat_fixture("expected.json"))) {
    if (e["template"] != "smollm2_135m_instruct.jinja" || e.contains("error")) continue;
    for (const ojson& c : cases["conversations"])
      if (c["name"] == e["case"]) {
        EXPECT_EQ(t->render(inputs_of(c)), e["text"].get<std::string>()) << e["case"];
        ++checked;
      }
  }
  EXPECT_GT(checked, 5);
}

}  // namespace
}  // namespace skim
