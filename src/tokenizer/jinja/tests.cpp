// Jinja2's tests (`x is defined`, `x is equalto 3`), with Python's type rules (bool is a
// number, but not an `integer` for Jinja2).
#include <map>

#include "tokenizer/jinja/builtins.h"

namespace skim::jinja {

namespace {

using Test = bool (*)(const Value&, const CallArgs&);

const Value& arg(const CallArgs& a, const char* test) {
  const Value* v = a.get(0, nullptr);
  if (!v) render_fail(std::string("test '") + test + "' takes an argument");
  return *v;
}

int64_t integer(const Value& v, const char* test) {
  if (!v.is_number()) render_fail(std::string("test '") + test + "' needs a number");
  if (v.is_float()) return int64_t(v.as_number());
  return v.as_int();
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> t = {
      {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const CallArgs&) { return v.is_none(); }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
      {"number", [](const Value& v, const CallArgs&) { return v.is_number(); }},
      {"integer", [](const Value& v, const CallArgs&) { return v.is_int() && !v.is_bool(); }},
      {"float", [](const Value& v, const CallArgs&) { return v.is_float(); }},
      {"boolean", [](const Value& v, const CallArgs&) { return v.is_bool(); }},
      {"true", [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }},
      {"mapping", [](const Value& v, const CallArgs&) { return v.is_dict() && !v.as_dict().is_namespace; }},
      {"iterable", [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace);
       }},
      {"sequence", [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace);
       }},
      {"callable", [](const Value& v, const CallArgs&) { return v.is_function(); }},
      {"odd", [](const Value& v, const CallArgs&) { return integer(v, "odd") % 2 != 0; }},
      {"even", [](const Value& v, const CallArgs&) { return integer(v, "even") % 2 == 0; }},
      {"divisibleby", [](const Value& v, const CallArgs& a) {
         const int64_t d = integer(arg(a, "divisibleby"), "divisibleby");
         if (d == 0) render_fail("divisibleby 0");
         return integer(v, "divisibleby") % d == 0;
       }},
      {"lower", [](const Value& v, const CallArgs&) {
         return v.is_string() && v.as_string().find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") == std::string::npos;
       }},
      {"upper", [](const Value& v, const CallArgs&) {
         return v.is_string() && v.as_string().find_first_of("abcdefghijklmnopqrstuvwxyz") == std::string::npos;
       }},
      {"in", [](const Value& v, const CallArgs& a) { return contains(arg(a, "in"), v); }},
      {"sameas", [](const Value& v, const CallArgs& a) {
         const Value& o = arg(a, "sameas");
         if (v.is_dict() && o.is_dict()) return v.dict_ptr() == o.dict_ptr();
         // Python's small ints and short strings are shared objects: `is` holds for equal ones.
         if ((v.is_int() && !v.is_bool() && o.is_int() && !o.is_bool()) || (v.is_string() && o.is_string())) return equals(v, o);
         return (v.is_none() && o.is_none()) || (v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool());
       }},
      {"eq", [](const Value& v, const CallArgs& a) { return equals(v, arg(a, "eq")); }},
      {"ne", [](const Value& v, const CallArgs& a) { return !equals(v, arg(a, "ne")); }},
      {"lt", [](const Value& v, const CallArgs& a) { return less(v, arg(a, "lt")); }},
      {"le", [](const Value& v, const CallArgs& a) { return !less(arg(a, "le"), v); }},
      {"gt", [](const Value& v, const CallArgs& a) { return less(arg(a, "gt"), v); }},
      {"ge", [](const Value& v, const CallArgs& a) { return !less(v, arg(a, "ge")); }},
  };
  return t;
}

// Jinja2's other names for the comparison tests.
std::string canonical(const std::string& name) {
  static const std::map<std::string, std::string> aliases = {
      {"equalto", "eq"}, {"==", "eq"}, {"!=", "ne"}, {"lessthan", "lt"}, {"<", "lt"}, {"<=", "le"},
      {"greaterthan", "gt"}, {">", "gt"}, {">=", "ge"}};
  auto it = aliases.find(name);
  return it == aliases.end() ? name : it->second;
}

}  // namespace

bool is_test(const std::string& name) { return tests().count(canonical(name)) > 0; }

bool apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = tests().find(canonical(name));
  if (it == tests().end()) render_fail("unknown test '" + name + "'");
  return it->second(input, args);
}

}  // namespace skim::jinja
