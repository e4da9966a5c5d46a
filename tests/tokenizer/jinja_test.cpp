// The Jinja2 interpreter piece by piece: Python's printing and arithmetic, whitespace control
// as transformers configures it, scoping, filters and tests, and errors that name the line.
// (Whole templates against jinja2 itself: chat_template_test.cpp.)
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/jinja/template.h"

namespace skim::jinja {
namespace {

std::string render(const std::string& src, const char* vars = "{}", Limits limits = {}) {
  const Value v = from_json(nlohmann::ordered_json::parse(vars));
  return Template(src, "t.jinja", limits).render(v.as_dict());
}

// The error message of rendering src ("" when it renders).
std::string error_of(const std::string& src, const char* vars = "{}", Limits limits = {}) {
  try {
    render(src, vars, limits);
  } catch (const Error& e) {
    return e.what();
  } catch (const RenderError& e) {  // from_json, before the template runs
    return e.what();
  }
  return "";
}

TEST(Jinja, PrintsValuesAsPython) {
  EXPECT_EQ(render("{{ none }} {{ true }} {{ false }} {{ 1 }} {{ 1.0 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 }} {{ 100.0 }}"),
            "None True False 1 1.0 1e+20 1.5e-07 0.1 100.0");
  EXPECT_EQ(render("{{ x }}|{{ [1, 'a', none] }}|{{ {'a': 1, 'b': [true]} }}|{{ \"it's\" }}"), "|[1, 'a', None]|{'a': 1, 'b': [True]}|it's");
  EXPECT_EQ(render("{{ [\"it's\"] }} {{ ['a\\nb'] }}"), "[\"it's\"] ['a\\nb']");
  EXPECT_EQ(render("{{ d }}", R"({"d": {"z": 1, "a": 2}})"), "{'z': 1, 'a': 2}");  // insertion order
  EXPECT_EQ(render("{{ '\\u00e9\\x41\\t|' }}"), "\xC3\xA9" "A\t|");
}

TEST(Jinja, ArithmeticIsPythons) {
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2 ** 3 }} {{ 2 ** -1 }} {{ 1 + 1.5 }}"),
            "3.5 3 -4 2 3.0 8 0.5 2.5");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ x }} {{ 'ab' * 2 }} {{ [0] * 3 }} {{ [1] + [2] }} {{ -(3) }} {{ true + 1 }}"),
            "a1None abab [0, 0, 0] [1, 2] -3 2");
  EXPECT_EQ(render("{{ 1 + 2 is odd }} {{ -3 | abs }} {{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "1 3 True True False");
  EXPECT_NE(error_of("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand"), std::string::npos);
}

TEST(Jinja, WhitespaceControlAsTransformersSetsIt) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a {{- ' b ' -}} c"), "a b c");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("a\n  {# note #}\nb"), "a\nb");
  EXPECT_EQ(render("{{ 1 }}\n{{ 2 }}\n"), "1\n2");  // one final newline dropped, expression newlines kept
  EXPECT_EQ(render("a\r\nb"), "a\nb");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("{{ {'a': {'b': 1}}['a'] }}"), "{'b': 1}");  // "}}" inside brackets is not the tag's end
}

TEST(Jinja, ScopesAsJinja) {
  // A loop body's assignments last one iteration; namespaces carry state out.
  EXPECT_EQ(render("{% set x = 'top' %}{% for i in [1, 2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}{{ x }}{% endfor %}{{ x }}"),
            "atoptop");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  EXPECT_EQ(render("{% if true %}{% set y = 1 %}{% endif %}{{ y }}"), "1");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set s %}[{{ 1 + 1 }}]{% endset %}{{ s }}{{ s | length }}"), "[2]3");
  // Macros: defaults, keywords, the template's names at call time.
  EXPECT_EQ(render("{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{{ g }}{% endmacro %}{% set g = '!' %}{{ m(1) }} {{ m(1, c=3) }}"),
            "1BNone! 1B3!");
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.y = 2 %}").find("non-namespace"), std::string::npos);
}

TEST(Jinja, LoopsAndLoopControls) {
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }}:{{ x }}{{ ',' if not loop.last }}{% endfor %}",
                   R"({"xs": [1, 2, 3]})"),
            "1/2:2,2/2:3");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "024");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}", R"({"d": {"b": 1, "a": 2}})"),
            "b1a2|ba");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.revindex0 }}{{ loop.cycle('-', '+') }}{{ x }}{% endfor %}"), "1-a0+b");
  EXPECT_NE(error_of("{% break %}").find("outside a loop"), std::string::npos);
}

TEST(Jinja, FiltersAndTests) {
  const char* msgs = R"({"m": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "user"}]})";
  EXPECT_EQ(render("{{ m | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}", msgs), "['u', Undefined]");
  EXPECT_EQ(render("{{ m | rejectattr('content', 'defined') | length }} {{ m | map(attribute='role') | unique | join('+') }}", msgs),
            "1 system+user");
  EXPECT_EQ(render("{{ x | default('d') }} {{ '' | default('d') }} {{ '' | d('d', true) }} {{ none is none }} {{ x is defined }}"),
            "d  d True False");
  EXPECT_EQ(render("{{ 'a b' | upper }} {{ ' x ' | trim }} {{ 'a-b' | replace('-', '') }} {{ [3, 1, 2] | sort | first }} {{ [1, 2] | last }}"),
            "A B x ab 1 2");
  EXPECT_EQ(render("{{ v | tojson }} {{ v | tojson(indent=2) }}", R"({"v": {"é": [1, 2.0, null]}})"),
            "{\"é\": [1, 2.0, null]} {\n  \"é\": [\n    1,\n    2.0,\n    null\n  ]\n}");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}"), "a\n  b|  a\n  b");
  EXPECT_EQ(render("{{ 3 is integer }} {{ 3.0 is integer }} {{ true is number }} {{ {} is mapping }} {{ 'x' is string }} {{ 4 is even }}"),
            "True False True True True True");
  EXPECT_EQ(render("{{ 'x' in 'xyz' }} {{ 'k' in {'k': 1} }} {{ 2 not in [1] }}"), "True True True");
}

TEST(Jinja, StringAndDictMethods) {
  EXPECT_EQ(render("{{ ' a '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'abc'.startswith('ab') }}|{{ 'x'.upper() }}|{{ 'a b'.title() }}"),
            "a|['a', 'b']|True|X|A B");
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('z', 0) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items }}",
                   R"({"d": {"a": 1, "items": "key"}})"),
            "1 0 ['a', 'items'] [1, 'key'] <function items>");
  EXPECT_EQ(render("{{ s[1:] }} {{ s[::-1] }} {{ s[-1] }} {{ l[1:3] }} {{ l[-1] }}", R"({"s": "héllo", "l": [1, 2, 3, 4]})"),
            "éllo olléh o [2, 3] 4");
}

TEST(Jinja, ErrorsNameTheSourceAndLine) {
  EXPECT_EQ(error_of("a\n{{ raise_exception('bad turn') }}"), "t.jinja:2: raise_exception: bad turn");
  EXPECT_EQ(error_of("a\nb\n{% include 'x' %}").rfind("t.jinja:3: unsupported tag '{% include %}'", 0), 0u);
  EXPECT_EQ(error_of("\n{{ x | frobnicate }}").rfind("t.jinja:2: unknown filter 'frobnicate'", 0), 0u);
  EXPECT_EQ(error_of("{{ x is frob }}").rfind("t.jinja:1: unknown test 'frob'", 0), 0u);
  EXPECT_EQ(error_of("\n\n{% if x %}").rfind("t.jinja:3:", 0), 0u);           // never closed
  EXPECT_EQ(error_of("{{ x.y }}").rfind("t.jinja:1: 'x' is undefined", 0), 0u);
  EXPECT_EQ(error_of("{{ 'unclosed }}").rfind("t.jinja:1:", 0), 0u);
  EXPECT_EQ(error_of("{% for x in [1] %}{% endif %}").rfind("t.jinja:1:", 0), 0u);
  EXPECT_EQ(error_of("{{ 1 +* 2 }}").rfind("t.jinja:1:", 0), 0u);
  EXPECT_EQ(error_of("x\n{{ 'a'.nosuch() }}").rfind("t.jinja:2:", 0), 0u);
}

TEST(Jinja, HostileTemplatesHitLimits) {
  Limits small;
  small.max_steps = 100000;
  small.max_size = 1 << 20;
  EXPECT_NE(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "{}", small).find("step limit"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000 }}", "{}", small).find("limit"), std::string::npos);
  EXPECT_NE(error_of("{{ range(100000000) | length }}", "{}", small).find("limit"), std::string::npos);
  EXPECT_NE(error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("too deeply"), std::string::npos);
  EXPECT_NE(error_of(std::string("{{ ") + std::string(3000, '[') + std::string(3000, ']') + " }}").find("too deeply"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 500; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).find("too deeply"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}")
                .find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x }}", (std::string(1000, '[') + std::string(1000, ']')).insert(0, "{\"x\": ").append("}").c_str())
                .find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "{}", small)
                .find("limit"),
            std::string::npos);
}

}  // namespace
}  // namespace skim::jinja
