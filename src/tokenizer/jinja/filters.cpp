// Jinja2's filters as chat templates use them; tojson is transformers' override
// (json.dumps with ensure_ascii=False, no HTML escaping).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/methods.h"

namespace skim::jinja {

namespace {

using Filter = Value (*)(const Value&, const CallArgs&);

bool flag(const CallArgs& a, size_t i, const char* name, bool dflt = false) {
  const Value* v = a.get(i, name);
  return v ? truthy(*v) : dflt;
}

const Value* opt(const CallArgs& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  return v && !v->is_none() ? v : nullptr;
}

// `attribute="a.b"` or `attribute=0`: Jinja2's make_attrgetter (item lookup per dotted part).
Value attr_path(const Value& item, const Value& path) {
  if (path.is_int()) return get_item(item, path);
  Value v = item;
  const std::string& p = path.as_string();
  size_t from = 0;
  for (;;) {
    const size_t dot = p.find('.', from);
    const std::string part = p.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = v.is_undefined() ? v : get_item(v, digits ? Value(int64_t(std::atoll(part.c_str()))) : Value(part));
    if (dot == std::string::npos) return v;
    from = dot + 1;
  }
}

// The value sort/unique/min/max compare: the attribute, lower-cased unless case_sensitive.
Value sort_key(const Value& item, const Value* attribute, bool case_sensitive) {
  Value k = attribute ? attr_path(item, *attribute) : item;
  if (!case_sensitive && k.is_string()) return Value(py_lower(k.as_string()));
  return k;
}

std::string str_of(const Value& v) { return py_str(v); }

Value f_trim(const Value& v, const CallArgs& a) { return Value(py_strip(str_of(v), opt(a, 0, "chars"), true, true)); }
Value f_upper(const Value& v, const CallArgs&) { return Value(py_upper(str_of(v))); }
Value f_lower(const Value& v, const CallArgs&) { return Value(py_lower(str_of(v))); }
// Jinja2's title filter (not str.title): a word starts after whitespace, '-', or an opening
// bracket, so "they're" stays "They're".
Value f_title(const Value& v, const CallArgs&) {
  std::string s = str_of(v);
  bool start = true;
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    c = char(start ? std::toupper(u) : std::tolower(u));
    start = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  }
  return Value(std::move(s));
}
Value f_capitalize(const Value& v, const CallArgs&) { return Value(py_capitalize(str_of(v))); }
Value f_string(const Value& v, const CallArgs&) { return Value(str_of(v)); }
Value f_safe(const Value& v, const CallArgs&) { return v; }
Value f_length(const Value& v, const CallArgs&) { return Value(int64_t(length(v))); }
Value f_list(const Value& v, const CallArgs&) { return Value(iterate(v)); }

Value f_tojson(const Value& v, const CallArgs& a) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  const Value* indent = opt(a, 1, "indent");
  const Value* seps = opt(a, 2, "separators");
  if (indent && !indent->is_int()) render_fail("tojson: indent must be an integer");
  int width = indent ? int(std::clamp<int64_t>(indent->as_int(), 0, 64)) : -1;
  std::string item_sep = indent ? "," : ", ", key_sep = ": ";
  if (seps) {
    const List s = iterate(*seps);
    if (s.size() != 2 || !s[0].is_string() || !s[1].is_string()) render_fail("tojson: separators must be two strings");
    item_sep = s[0].as_string();
    key_sep = s[1].as_string();
  }
  return Value(to_json(v, width, item_sep, key_sep, flag(a, 0, "ensure_ascii"), flag(a, 3, "sort_keys")));
}

Value f_join(const Value& v, const CallArgs& a) {
  const Value* sep = opt(a, 0, "d");
  const Value* attribute = opt(a, 1, "attribute");
  const std::string d = sep ? str_of(*sep) : "";
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += d;
    out += str_of(attribute ? attr_path(x, *attribute) : x);
    check_size(out.size());
    first = false;
  }
  return Value(std::move(out));
}

Value f_replace(const Value& v, const CallArgs& a) {
  if (a.positional.size() < 2) render_fail("replace takes an old and a new string");
  const Value* count = opt(a, 2, "count");
  return Value(py_replace(str_of(v), str_of(a.positional[0]), str_of(a.positional[1]), count ? count->as_int() : -1));
}

Value f_default(const Value& v, const CallArgs& a) {
  const bool use = v.is_undefined() || (flag(a, 1, "boolean") && !truthy(v));
  if (!use) return v;
  const Value* d = a.get(0, "default_value");
  return d ? *d : Value("");
}

Value f_items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict()) render_fail(std::string("items: expected a mapping, got ") + type_name(v));
  List out;
  for (const auto& [k, x] : v.as_dict().items()) out.push_back(Value::tuple(List{Value(k), x}));
  return Value(std::move(out));
}

Value f_first(const Value& v, const CallArgs&) {
  const List l = iterate(v);
  return l.empty() ? Value::undefined("first") : l.front();
}
Value f_last(const Value& v, const CallArgs&) {
  const List l = iterate(v);
  return l.empty() ? Value::undefined("last") : l.back();
}

Value f_reverse(const Value& v, const CallArgs&) {
  List l = iterate(v);
  std::reverse(l.begin(), l.end());
  if (!v.is_string()) return Value(std::move(l));
  std::string out;
  for (const Value& c : l) out += c.as_string();
  return Value(std::move(out));
}

// select/reject (test on the item), selectattr/rejectattr (test on an attribute).
Value select(const Value& v, const CallArgs& a, bool by_attribute, bool keep) {
  size_t i = 0;
  const Value* attribute = nullptr;
  if (by_attribute) {
    if (a.positional.empty()) render_fail("selectattr/rejectattr need an attribute");
    attribute = &a.positional[i++];
  }
  std::string test;
  if (i < a.positional.size()) test = str_of(a.positional[i++]);
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + std::ptrdiff_t(std::min(i, a.positional.size())), a.positional.end());
  List out;
  for (const Value& x : iterate(v)) {
    const Value probe = attribute ? attr_path(x, *attribute) : x;
    const bool pass = test.empty() ? truthy(probe) : apply_test(test, probe, rest);
    if (pass == keep) out.push_back(x);
  }
  return Value(std::move(out));
}
Value f_select(const Value& v, const CallArgs& a) { return select(v, a, false, true); }
Value f_reject(const Value& v, const CallArgs& a) { return select(v, a, false, false); }
Value f_selectattr(const Value& v, const CallArgs& a) { return select(v, a, true, true); }
Value f_rejectattr(const Value& v, const CallArgs& a) { return select(v, a, true, false); }

Value f_map(const Value& v, const CallArgs& a) {
  List out;
  if (const Value* attribute = a.get(size_t(-1), "attribute")) {
    const Value* dflt = a.get(size_t(-1), "default");
    for (const Value& x : iterate(v)) {
      Value r = attr_path(x, *attribute);
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return Value(std::move(out));
  }
  if (a.positional.empty()) render_fail("map needs a filter name or attribute=");
  const std::string name = str_of(a.positional[0]);
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& x : iterate(v)) out.push_back(apply_filter(name, x, rest));
  return Value(std::move(out));
}

// A number's text as Python's int() and float() read it: surrounding whitespace, '_' between
// digits; no hexadecimal (which strtod would take). "" when it is not one.
std::string python_number_text(const std::string& raw) {
  const std::string s = py_strip(raw, nullptr, true, true);
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 'x' || s[i] == 'X' || s[i] == 'p' || s[i] == 'P') return "";
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return "";
      continue;
    }
    out += s[i];
  }
  return out;
}

Value f_int(const Value& v, const CallArgs& a) {
  const Value* dflt = a.get(0, "default");
  const Value fallback = dflt ? *dflt : Value(int64_t(0));
  if (v.is_int()) return Value(v.as_int());
  if (v.is_float()) {
    const double f = v.as_number();
    if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return fallback;
    return Value(int64_t(f));
  }
  if (!v.is_string()) return fallback;
  const std::string s = python_number_text(v.as_string());
  if (s.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  if (!s.empty() && *end == 0 && errno == 0) return Value(int64_t(i));
  const double f = std::strtod(s.c_str(), &end);
  if (!s.empty() && *end == 0 && std::isfinite(f) && std::fabs(f) < 9.2e18) return Value(int64_t(f));
  return fallback;
}

Value f_float(const Value& v, const CallArgs& a) {
  const Value* dflt = a.get(0, "default");
  const Value fallback = dflt ? *dflt : Value(0.0);
  if (v.is_number()) return Value(v.as_number());
  if (!v.is_string()) return fallback;
  const std::string s = python_number_text(v.as_string());
  if (s.empty()) return fallback;
  char* end = nullptr;
  const double f = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == 0 ? Value(f) : fallback;
}

Value f_abs(const Value& v, const CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_number()));
  if (!v.is_int()) render_fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
  if (v.as_int() == INT64_MIN) render_fail("integer overflow");
  return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
}

Value f_round(const Value& v, const CallArgs& a) {
  if (!v.is_number()) render_fail("round needs a number");
  const Value* p = opt(a, 0, "precision");
  const Value* m = opt(a, 1, "method");
  const int digits = p ? int(std::clamp<int64_t>(p->as_int(), -300, 300)) : 0;
  const std::string method = m ? str_of(*m) : "common";
  if (method == "common" && v.is_int()) return Value(v.as_int());  // Python's round(int, n) is the int
  if (method == "common" && digits >= 0 && std::isfinite(v.as_number())) {
    // Python's round() rounds the exact binary value half to even, as printf does.
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v.as_number());
    return Value(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, digits), x = v.as_number() * scale;
  double r;
  if (method == "common") r = std::nearbyint(x);
  else if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else render_fail("round: method must be common, ceil or floor");
  return Value(r / scale);
}

Value f_indent(const Value& v, const CallArgs& a) {
  const Value* w = a.get(0, "width");
  const std::string ind = w && w->is_string() ? w->as_string() : std::string(size_t(w ? std::clamp<int64_t>(w->as_int(), 0, 256) : 4), ' ');
  const bool first = flag(a, 1, "first"), blank = flag(a, 2, "blank");
  // Python's splitlines on the text + "\n" (Jinja2's own trick to keep a trailing newline).
  std::vector<std::string> ls;
  const std::string s = str_of(v) + "\n";
  size_t from = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n' || s[i] == '\r') {
      ls.push_back(s.substr(from, i - from));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      from = i + 1;
    }
  std::string out = ls.empty() ? "" : ls[0];
  for (size_t i = 1; i < ls.size(); ++i) {
    out += "\n";
    if (blank || !ls[i].empty()) out += ind;
    out += ls[i];
    check_size(out.size());
  }
  return Value(first ? ind + out : out);
}

Value f_unique(const Value& v, const CallArgs& a) {
  const bool cs = flag(a, 0, "case_sensitive");
  const Value* attribute = opt(a, 1, "attribute");
  List out, seen;
  for (const Value& x : iterate(v)) {
    Value k = sort_key(x, attribute, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(std::move(k));
    out.push_back(x);
  }
  return Value(std::move(out));
}

Value f_sort(const Value& v, const CallArgs& a) {
  const bool reverse = flag(a, 0, "reverse"), cs = flag(a, 1, "case_sensitive");
  const Value* attribute = opt(a, 2, "attribute");
  List l = iterate(v);
  std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
    return reverse ? less(sort_key(y, attribute, cs), sort_key(x, attribute, cs))
                   : less(sort_key(x, attribute, cs), sort_key(y, attribute, cs));
  });
  return Value(std::move(l));
}

Value f_dictsort(const Value& v, const CallArgs& a) {
  const bool cs = flag(a, 0, "case_sensitive"), reverse = flag(a, 2, "reverse");
  const Value* by = opt(a, 1, "by");
  const size_t pos = by && str_of(*by) == "value" ? 1 : 0;
  List l = f_items(v, a).as_list();
  std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.as_list()[pos], nullptr, cs), ky = sort_key(y.as_list()[pos], nullptr, cs);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value(std::move(l));
}

Value extreme(const Value& v, const CallArgs& a, bool want_max) {
  const bool cs = flag(a, 0, "case_sensitive");
  const Value* attribute = opt(a, 1, "attribute");
  const List l = iterate(v);
  if (l.empty()) return Value::undefined(want_max ? "max" : "min");
  size_t best = 0;
  for (size_t i = 1; i < l.size(); ++i) {
    const Value ki = sort_key(l[i], attribute, cs), kb = sort_key(l[best], attribute, cs);
    if (want_max ? less(kb, ki) : less(ki, kb)) best = i;
  }
  return l[best];
}
Value f_min(const Value& v, const CallArgs& a) { return extreme(v, a, false); }
Value f_max(const Value& v, const CallArgs& a) { return extreme(v, a, true); }

Value f_sum(const Value& v, const CallArgs& a) {
  const Value* attribute = opt(a, 0, "attribute");
  const Value* start = a.get(1, "start");
  Value total = start ? *start : Value(int64_t(0));
  for (const Value& x : iterate(v)) {
    const Value y = attribute ? attr_path(x, *attribute) : x;
    if (!total.is_number() || !y.is_number()) render_fail("sum needs numbers");
    if (total.is_float() || y.is_float()) total = Value(total.as_number() + y.as_number());
    else {
      int64_t r = 0;
      if (__builtin_add_overflow(total.as_int(), y.as_int(), &r)) render_fail("integer overflow");
      total = Value(r);
    }
  }
  return total;
}

Value f_batch(const Value& v, const CallArgs& a) {
  const Value* n = a.get(0, "linecount");
  if (!n || !n->is_int() || n->as_int() <= 0) render_fail("batch needs a positive count");
  const Value* fill = opt(a, 1, "fill_with");
  List out, cur;
  for (const Value& x : iterate(v)) {
    cur.push_back(x);
    if (int64_t(cur.size()) == n->as_int()) out.push_back(Value(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    while (fill && int64_t(cur.size()) < n->as_int()) cur.push_back(*fill);
    out.push_back(Value(std::move(cur)));
  }
  return Value(std::move(out));
}

Value f_attr(const Value& v, const CallArgs& a) {
  const Value* n = a.get(0, "name");
  if (!n || !n->is_string()) render_fail("attr needs a name");
  if (v.is_dict() && !v.as_dict().is_namespace) {  // getattr only: a dict's methods, not its keys
    Value m = bound_method(v, n->as_string());
    return m.is_undefined() ? Value::undefined(n->as_string()) : m;
  }
  return get_attr(v, n->as_string());
}

Value f_escape(const Value& v, const CallArgs&) {
  std::string out;
  for (char c : str_of(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> f = {
      {"trim", f_trim},         {"upper", f_upper},       {"lower", f_lower},     {"title", f_title},
      {"capitalize", f_capitalize}, {"string", f_string}, {"safe", f_safe},       {"length", f_length},
      {"count", f_length},      {"list", f_list},         {"tojson", f_tojson},   {"join", f_join},
      {"replace", f_replace},   {"default", f_default},   {"d", f_default},       {"items", f_items},
      {"first", f_first},       {"last", f_last},         {"reverse", f_reverse}, {"select", f_select},
      {"reject", f_reject},     {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"map", f_map},
      {"int", f_int},           {"float", f_float},       {"abs", f_abs},         {"round", f_round},
      {"indent", f_indent},     {"unique", f_unique},     {"sort", f_sort},       {"dictsort", f_dictsort},
      {"min", f_min},           {"max", f_max},           {"sum", f_sum},         {"batch", f_batch},
      {"attr", f_attr},         {"escape", f_escape},     {"e", f_escape},
  };
  return f;
}

}  // namespace

bool is_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) render_fail("unknown filter '" + name + "'");
  return it->second(input, args);
}

}  // namespace skim::jinja
