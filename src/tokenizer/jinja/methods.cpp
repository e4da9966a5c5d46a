#include "tokenizer/jinja/methods.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/utf8.h"

namespace skim::jinja {

namespace {

// Python's str.isspace: Unicode White_Space plus the ASCII separators \x1c-\x1f.
bool py_space(char32_t c) { return (c >= 0x1c && c <= 0x1f) || tok::is_unicode_whitespace(c); }

// Code point at i (invalid bytes: themselves, never whitespace) and its length.
char32_t cp_at(const std::string& s, size_t i, size_t* n) {
  const tok::Utf8Step st = tok::utf8_step(s, i);
  if (!st.valid) {
    *n = std::max<size_t>(1, st.length);
    return 0xFFFD;
  }
  return tok::utf8_decode(s, i, n);
}

const std::string& want_string(const Value& v, const char* what) {
  if (!v.is_string()) render_fail(std::string(what) + " must be a string, not " + type_name(v));
  return v.as_string();
}

int64_t int_arg(const CallArgs& a, size_t i, const char* name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int()) render_fail(std::string(name) + " must be an integer");
  return v->as_int();
}

bool affix(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const Value& x) {
    const std::string& p = want_string(x, prefix ? "startswith's argument" : "endswith's argument");
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg.is_list()) return std::any_of(arg.as_list().begin(), arg.as_list().end(), one);
  return one(arg);
}

Value string_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const Value* x = a.get(0, nullptr);
  if (name == "startswith" || name == "endswith") {
    if (!x) render_fail(name + "() takes an argument");
    return Value(affix(s, *x, name == "startswith"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value(py_strip(s, x, name != "rstrip", name != "lstrip"));
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "split") return Value(py_split(s, a.get(0, "sep"), int_arg(a, 1, "maxsplit", -1)));
  if (name == "splitlines") {
    List out;
    size_t from = 0;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == '\n' || s[i] == '\r') {
        out.push_back(Value(s.substr(from, i - from)));
        check_list_size(out.size());
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        from = i + 1;
      }
    if (from < s.size()) out.push_back(Value(s.substr(from)));
    return Value(std::move(out));
  }
  if (name == "replace") {
    if (a.positional.size() < 2) render_fail("replace() takes two arguments");
    return Value(py_replace(s, want_string(a.positional[0], "replace's old"), want_string(a.positional[1], "replace's new"),
                            int_arg(a, 2, "count", -1)));
  }
  if (name == "find" || name == "count") {
    if (!x) render_fail(name + "() takes an argument");
    const std::string& sub = want_string(*x, name.c_str());
    if (name == "find") {
      const size_t p = s.find(sub);
      return Value(p == std::string::npos ? int64_t(-1) : int64_t(code_point_count(s.substr(0, p))));
    }
    if (sub.empty()) return Value(int64_t(code_point_count(s) + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    if (!x) render_fail("join() takes an argument");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(*x)) {
      if (!first) out += s;
      out += want_string(v, "join's items");
      check_size(out.size());
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (unsigned char c : s) {
      const bool ok = name == "isdigit" ? std::isdigit(c) : name == "isspace" ? std::isspace(c)
                    : name == "isalpha" ? std::isalpha(c) : std::isalnum(c);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  return Value::undefined(name);
}

Value dict_method(const Value& d, const std::string& name, const CallArgs& a) {
  const Dict& dict = d.as_dict();
  if (name == "items" || name == "keys" || name == "values") {
    List out;
    for (const auto& [k, v] : dict.items()) {
      if (name == "items") out.push_back(Value::tuple(List{Value(k), v}));
      else out.push_back(name == "keys" ? Value(k) : v);
    }
    return Value(std::move(out));
  }
  // get
  const Value* key = a.get(0, nullptr);
  if (!key) render_fail("get() takes a key");
  const Value* dflt = a.get(1, nullptr);
  const Value* v = key->is_string() ? dict.find(key->as_string()) : nullptr;
  return v ? *v : dflt ? *dflt : Value(None{});
}

bool is_string_method(const std::string& n) {
  static const char* kNames[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "upper", "lower",
                                 "title", "capitalize", "split", "splitlines", "replace", "find", "count",
                                 "join", "isdigit", "isspace", "isalpha", "isalnum"};
  return std::any_of(std::begin(kNames), std::end(kNames), [&](const char* k) { return n == k; });
}

}  // namespace

Value bound_method(const Value& obj, const std::string& name) {
  if (obj.is_string() && is_string_method(name)) {
    return Value(Function{name, [s = obj.as_string(), name](CallArgs& a) { return string_method(s, name, a); }});
  }
  if (obj.is_dict() && (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return Value(Function{name, [obj, name](CallArgs& a) { return dict_method(obj, name, a); }});
  }
  return Value::undefined(name);
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::string> cps = code_points(s);
  std::vector<std::string> set;
  const bool ws = !chars || chars->is_none();
  if (!ws) set = code_points(want_string(*chars, "strip's argument"));
  auto strip_it = [&](const std::string& c) {
    if (!ws) return std::find(set.begin(), set.end(), c) != set.end();
    size_t n = 0;
    return py_space(cp_at(c, 0, &n));
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

std::string py_upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string py_lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = char(prev_cased ? std::tolower(u) : std::toupper(u));
      prev_cased = true;
    } else {
      prev_cased = u >= 0x80 && prev_cased;  // (non-ASCII letters: left as they are)
    }
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::string out = py_lower(s);
  if (!out.empty()) out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    int64_t n = 0;
    for (const std::string& c : code_points(s)) {
      if (count < 0 || n++ < count) out += to;
      out += c;
      check_size(out.size());
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    check_size(out.size());
    pos = at + from.size();
  }
  out.append(s, pos, std::string::npos);
  check_size(out.size());
  return out;
}

List py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List out;
  if (sep && !sep->is_none()) {
    const std::string& d = want_string(*sep, "split's separator");
    if (d.empty()) render_fail("empty separator");
    size_t pos = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      const size_t at = s.find(d, pos);
      if (at == std::string::npos) break;
      out.push_back(Value(s.substr(pos, at - pos)));
      check_list_size(out.size());
      pos = at + d.size();
    }
    out.push_back(Value(s.substr(pos)));
    return out;
  }
  // Runs of whitespace separate; leading and trailing whitespace gives no empty items.
  size_t i = 0, n = 0;
  int64_t splits = 0;
  while (i < s.size()) {
    while (i < s.size() && py_space(cp_at(s, i, &n))) i += n;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && splits == maxsplit) {
      size_t e = s.size();
      while (e > i) {  // the rest, right-stripped
        size_t b = e - 1;
        while (b > i && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        if (!py_space(cp_at(s, b, &n))) break;
        e = b;
      }
      out.push_back(Value(s.substr(i, e - i)));
      break;
    }
    const size_t from = i;
    while (i < s.size() && !py_space(cp_at(s, i, &n))) i += n;
    out.push_back(Value(s.substr(from, i - from)));
    check_list_size(out.size());
    ++splits;
  }
  return out;
}

}  // namespace skim::jinja
