// Attribute and item lookup, slicing, iteration and `in`: how Jinja2 reaches into Python
// values (getattr first for `.name`, getitem first for `[key]`).
#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/methods.h"

namespace skim::jinja {

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) render_fail("'" + obj.undefined_name() + "' is undefined (reading ." + name + ")");
  if (obj.is_dict()) {
    if (!obj.as_dict().is_namespace) {
      Value m = bound_method(obj, name);
      if (!m.is_undefined()) return m;
    }
    const Value* v = obj.as_dict().find(name);
    return v ? *v : Value::undefined(name);
  }
  Value m = bound_method(obj, name);
  return m.is_undefined() ? Value::undefined(name) : m;
}

namespace {

std::string bracketed(const std::string& s) {
  std::string out = "[";
  out += s;
  out += ']';
  return out;
}

// A Python index into n elements, or -1 when out of range.
int64_t index_of(const Value& key, size_t n) {
  int64_t i = key.as_int();
  if (i < 0) i += int64_t(n);
  return i < 0 || i >= int64_t(n) ? -1 : i;
}

}  // namespace

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) render_fail("'" + obj.undefined_name() + "' is undefined (reading [" + py_repr(key) + "])");
  if (obj.is_dict() && key.is_string()) {
    const Value* v = obj.as_dict().find(key.as_string());
    if (v) return *v;
  }
  if (obj.is_list() && key.is_int()) {
    const int64_t i = index_of(key, obj.as_list().size());
    return i < 0 ? Value::undefined(bracketed(py_str(key))) : obj.as_list()[size_t(i)];
  }
  if (obj.is_string() && key.is_int()) {
    const std::string& s = obj.as_string();
    if (code_point_count(s) == s.size()) {  // ASCII: index the bytes
      const int64_t i = index_of(key, s.size());
      return i < 0 ? Value::undefined(bracketed(py_str(key))) : Value(std::string(1, s[size_t(i)]));
    }
    const std::vector<std::string> cps = code_points(s);
    const int64_t i = index_of(key, cps.size());
    return i < 0 ? Value::undefined(bracketed(py_str(key))) : Value(cps[size_t(i)]);
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(bracketed(py_repr(key)));
}

namespace {

// Python's slice.indices(n) and the positions it selects.
// (bounds_only: just {begin, end} of a forward slice, or {} when it is empty.)
std::vector<size_t> slice_positions(size_t n, const Value& start, const Value& stop, const Value& step,
                                    bool bounds_only = false) {
  auto integer = [](const Value& v, const char* what) {
    if (!v.is_int()) render_fail(std::string("slice ") + what + " must be an integer or none");
    return v.as_int();
  };
  const int64_t len = int64_t(n);
  const int64_t st = step.is_none() ? 1 : integer(step, "step");
  if (st == 0) render_fail("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = integer(v, "index");
    if (i < 0) i = std::max<int64_t>(i + len, st < 0 ? -1 : 0);
    return std::min<int64_t>(i, st < 0 ? len - 1 : len);
  };
  const int64_t b = clamp(start, st < 0 ? len - 1 : 0), e = clamp(stop, st < 0 ? -1 : len);
  if (bounds_only) return b < e ? std::vector<size_t>{size_t(b), size_t(e)} : std::vector<size_t>{};
  std::vector<size_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(size_t(i));
  return out;
}

}  // namespace

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::string out;
    if (code_point_count(s) == s.size()) {  // ASCII: slice the bytes
      if (step.is_none() || (step.is_int() && step.as_int() == 1)) {
        const std::vector<size_t> ends = slice_positions(s.size(), start, stop, Value(None{}), true);
        return Value(ends.empty() ? std::string() : s.substr(ends[0], ends[1] - ends[0]));
      }
      for (size_t i : slice_positions(s.size(), start, stop, step)) out += s[i];
      return Value(std::move(out));
    }
    const std::vector<std::string> cps = code_points(s);
    for (size_t i : slice_positions(cps.size(), start, stop, step)) out += cps[i];
    return Value(std::move(out));
  }
  if (obj.is_list()) {
    List out;
    for (size_t i : slice_positions(obj.as_list().size(), start, stop, step)) out.push_back(obj.as_list()[i]);
    return Value(std::move(out));
  }
  render_fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
}

List iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.as_list();
  if (v.is_string()) {
    List out;
    for (std::string& c : code_points(v.as_string())) out.push_back(Value(std::move(c)));
    return out;
  }
  if (v.is_dict() && !v.as_dict().is_namespace) {
    List out;
    for (const auto& [k, x] : v.as_dict().items()) out.push_back(Value(k));
    return out;
  }
  render_fail(std::string("'") + type_name(v) + "' object is not iterable");
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (!needle.is_string()) render_fail("'in <string>' requires string as left operand, not " + std::string(type_name(needle)));
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_dict() && !haystack.as_dict().is_namespace)
    return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
  if (haystack.is_list())
    return std::any_of(haystack.as_list().begin(), haystack.as_list().end(), [&](const Value& x) { return equals(x, needle); });
  if (haystack.is_undefined()) return false;
  render_fail(std::string("argument of type '") + type_name(haystack) + "' is not iterable");
}

size_t length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return code_point_count(v.as_string());
  if (v.is_list()) return v.as_list().size();
  if (v.is_dict() && !v.as_dict().is_namespace) return v.as_dict().size();
  render_fail(std::string("object of type '") + type_name(v) + "' has no len()");
}

}  // namespace skim::jinja
