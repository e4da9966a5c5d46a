#include "tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>
#include <algorithm>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace skim::jinja {

void render_fail(const std::string& message) { throw RenderError(message); }

namespace {
thread_local size_t size_limit = size_t(32) << 20;
}

void set_size_limit(size_t n) { size_limit = n; }
void check_list_size(size_t n) {
  if (n > size_limit / 32) render_fail("a list of " + std::to_string(n) + " elements exceeds the template limit of " + std::to_string(size_limit / 32));
}
void check_size(size_t n) {
  if (n > size_limit) render_fail("a string or list of " + std::to_string(n) + " exceeds the template limit of " + std::to_string(size_limit));
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items_.emplace_back(key, std::move(v));
}

const Value* CallArgs::get(size_t i, const char* name) const {
  if (name)
    for (const auto& [k, v] : keyword)
      if (k == name) return &v;
  return i < positional.size() ? &positional[i] : nullptr;
}

Value make_dict() { return Value(std::make_shared<Dict>()); }

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxNesting) render_fail("JSON nested deeper than " + std::to_string(kMaxNesting) + " levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      if (j.get<uint64_t>() > uint64_t(INT64_MAX)) return Value(j.get<double>());
      return Value(int64_t(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& x : j) l.push_back(from_json(x, depth + 1));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, x] : j.items()) d->append_new(k, from_json(x, depth + 1));  // JSON keys are unique
      return Value(std::move(d));
    }
    default: return Value(None{});  // binary, discarded: not JSON a request can carry
  }
}

bool nests_deeper_than(const Value& v, int limit) {
  if (!v.is_list() && !v.is_dict()) return false;
  if (limit <= 0) return true;
  if (v.is_list()) {
    for (const Value& x : v.as_list())
      if (nests_deeper_than(x, limit - 1)) return true;
    return false;
  }
  for (const auto& [k, x] : v.as_dict().items())
    if (nests_deeper_than(x, limit - 1)) return true;
  return false;
}

bool truthy(const Value& v) {
  if (v.is_undefined() || v.is_none()) return false;
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return v.as_int() != 0;
  if (v.is_float()) return v.as_number() != 0.0;
  if (v.is_string()) return !v.as_string().empty();
  if (v.is_list()) return !v.as_list().empty();
  if (v.is_dict()) return v.as_dict().is_namespace || v.as_dict().size() > 0;
  return true;
}

std::string py_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // The shortest digits that round-trip, then Python's layout: positional for exponents in
  // [-4, 16), otherwise d.ddde+XX.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string mantissa = sci.substr(0, e);
  const bool neg = mantissa[0] == '-';
  if (neg) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0.";
      out.append(size_t(-exp - 1), '0');
      out += digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ebuf;
  }
  if (neg) out.insert(out.begin(), '-');
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == q) out += std::string("\\") + char(q);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return out + q;
}

}  // namespace

std::string py_repr(const Value& v) {
  if (v.is_string()) return repr_string(v.as_string());
  if (v.is_undefined()) return "Undefined";
  if (v.is_list()) {
    std::string out = v.is_tuple() ? "(" : "[";
    for (size_t i = 0; i < v.as_list().size(); ++i) {
      out += (i ? ", " : "") + py_repr(v.as_list()[i]);
      check_size(out.size());
    }
    if (v.is_tuple()) return out + (v.as_list().size() == 1 ? ",)" : ")");
    return out + "]";
  }
  if (v.is_dict() && !v.as_dict().is_namespace) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.as_dict().items()) {
      out += (first ? "" : ", ") + repr_string(k) + ": " + py_repr(x);
      check_size(out.size());
      first = false;
    }
    return out + "}";
  }
  return py_str(v);
}

std::string py_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.as_bool() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.as_int());
  if (v.is_float()) return py_float(v.as_number());
  if (v.is_string()) return v.as_string();
  if (v.is_dict() && v.as_dict().is_namespace) return "<Namespace>";
  if (v.is_function()) return "<function " + v.as_function().name + ">";
  return py_repr(v);
}

const char* type_name(const Value& v) {
  if (v.is_undefined()) return "undefined";
  if (v.is_none()) return "NoneType";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_string()) return "str";
  if (v.is_list()) return "list";
  if (v.is_dict()) return v.as_dict().is_namespace ? "Namespace" : "dict";
  return "function";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_number() == b.as_number();
    return a.as_int() == b.as_int();
  }
  if (a.data().index() != b.data().index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!equals(x[i], y[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    const Dict &x = a.as_dict(), &y = b.as_dict();
    if (x.is_namespace || y.is_namespace) return &x == &y;
    if (x.size() != y.size()) return false;
    for (const auto& [k, v] : x.items()) {
      const Value* o = y.find(k);
      if (!o || !equals(v, *o)) return false;
    }
    return true;
  }
  return &a.as_function() == &b.as_function();
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_number() < b.as_number();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order = code point order
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less(x[i], y[i])) return true;
      if (less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  render_fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

namespace {

void json_char(std::string& out, unsigned char c) {
  switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default:
      if (c < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", c);
        out += b;
      } else {
        out += char(c);
      }
  }
}

// json.dumps's string escaping: '"', '\\' and control characters; with ensure_ascii also
// every non-ASCII character, as \uXXXX (UTF-16 surrogate pairs beyond the BMP).
void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto st = tok::utf8_step(s, i);
    if (!ensure_ascii || (unsigned char)s[i] < 0x80 || !st.valid) {
      json_char(out, (unsigned char)s[i]);
      ++i;
      continue;
    }
    size_t n = 0;
    char32_t cp = tok::utf8_decode(s, i, &n);
    char b[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(b, sizeof b, "\\u%04x\\u%04x", unsigned(0xD800 + (cp >> 10)), unsigned(0xDC00 + (cp & 0x3FF)));
    } else {
      std::snprintf(b, sizeof b, "\\u%04x", unsigned(cp));
    }
    out += b;
    i += n;
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  const std::string& item_sep;
  const std::string& key_sep;
  bool ensure_ascii, sort_keys;
  std::string out;

  void newline(int depth) {
    if (indent < 0) return;
    out += '\n';
    out.append(size_t(indent) * size_t(depth), ' ');
  }

  void write(const Value& v, int depth) {
    if (depth > 512) render_fail("tojson: nesting too deep");
    check_size(out.size());
    if (v.is_none()) out += "null";
    else if (v.is_bool()) out += v.as_bool() ? "true" : "false";
    else if (v.is_int()) out += std::to_string(v.as_int());
    else if (v.is_float()) {
      const double f = v.as_number();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : py_float(f);
    } else if (v.is_string()) json_string(out, v.as_string(), ensure_ascii);
    else if (v.is_list()) write_list(v.as_list(), depth);
    else if (v.is_dict() && !v.as_dict().is_namespace) write_dict(v.as_dict(), depth);
    else render_fail(std::string("tojson: Object of type ") + type_name(v) + " is not JSON serializable");
  }

  void write_list(const List& l, int depth) {
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      if (i) out += item_sep;
      newline(depth + 1);
      write(l[i], depth + 1);
    }
    newline(depth);
    out += ']';
  }

  void write_dict(const Dict& d, int depth) {
    if (d.size() == 0) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : d.items()) items.push_back(&kv);
    if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      newline(depth + 1);
      json_string(out, items[i]->first, ensure_ascii);
      out += key_sep;
      write(items[i]->second, depth + 1);
    }
    newline(depth);
    out += '}';
  }
};

}  // namespace

std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                    bool ensure_ascii, bool sort_keys) {
  JsonWriter w{indent, item_sep, key_sep, ensure_ascii, sort_keys, {}};
  w.write(v, 0);
  check_size(w.out.size());
  return std::move(w.out);
}

std::vector<std::string> code_points(const std::string& s) {
  check_list_size(code_point_count(s));
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::max<size_t>(1, tok::utf8_step(s, i).length);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t code_point_count(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace skim::jinja
