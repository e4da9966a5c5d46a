// The values a chat template computes with, modelled on the Python objects Jinja2 sees when
// transformers renders a template: JSON data (dicts keep insertion order), numbers that keep
// int and float apart, None, Jinja's Undefined, and callables (macros, builtins, bound
// methods). Lists and dicts are shared, as Python's are; templates cannot mutate them (the
// sandbox is immutable) except a namespace's attributes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace skim::jinja {

// An error while rendering; the interpreter adds the template's name and line.
struct RenderError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void render_fail(const std::string& message);

// The largest string (bytes) or list (elements) a render may build; set by the interpreter
// for the render running on this thread. check_size throws a RenderError beyond it.
// Lists may hold a 32nd as many elements (an element takes tens of bytes).
void set_size_limit(size_t n);
void check_size(size_t n);
void check_list_size(size_t n);

class Value;
using List = std::vector<Value>;

class Dict;
struct CallArgs;

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};

class Value {
 public:
  using Data = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<const List>,
                            std::shared_ptr<Dict>, std::shared_ptr<const Function>>;
  Value() : data_(Undefined{}) {}
  Value(None) : data_(None{}) {}
  Value(bool b) : data_(b) {}
  Value(int i) : data_(int64_t(i)) {}
  Value(int64_t i) : data_(i) {}
  Value(double f) : data_(f) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(List l) : data_(std::make_shared<const List>(std::move(l))) {}
  Value(std::shared_ptr<Dict> d) : data_(std::move(d)) {}
  Value(Function f) : data_(std::make_shared<const Function>(std::move(f))) {}
  // A Python tuple: a list that prints as (a, b) (dict.items(), tuple literals).
  static Value tuple(List l) {
    Value v(std::move(l));
    v.tuple_ = true;
    return v;
  }
  bool is_tuple() const { return tuple_ && is_list(); }
  static Value undefined(std::string name) {
    Value v;
    v.data_ = Undefined{std::move(name)};
    return v;
  }

  bool is_undefined() const { return std::holds_alternative<Undefined>(data_); }
  bool is_none() const { return std::holds_alternative<None>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_) || is_bool(); }  // Python: bool is an int
  bool is_float() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(data_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(data_); }
  bool is_function() const { return std::holds_alternative<std::shared_ptr<const Function>>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return is_bool() ? int64_t(as_bool()) : std::get<int64_t>(data_); }
  double as_number() const { return is_float() ? std::get<double>(data_) : double(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(data_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const std::shared_ptr<Dict>& dict_ptr() const { return std::get<std::shared_ptr<Dict>>(data_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  const std::string& undefined_name() const { return std::get<Undefined>(data_).name; }

  const Data& data() const { return data_; }

 private:
  Data data_;
  bool tuple_ = false;
};

// Insertion-ordered string-keyed map (JSON objects, dict literals, namespaces, loop).
class Dict {
 public:
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
  void append_new(std::string key, Value v) { items_.emplace_back(std::move(key), std::move(v)); }  // key not present
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool is_namespace = false;  // `{% set ns.x = ... %}` may assign its attributes

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Positional i or keyword `name`, or nullptr.
  const Value* get(size_t i, const char* name) const;
};

Value make_dict();  // an empty dict
// Throws a RenderError for JSON nested deeper than kMaxNesting.
Value from_json(const nlohmann::ordered_json& j, int depth = 0);
// Values nest at most this deep (lists and dicts in lists and dicts): deeper ones would make
// printing, comparing and freeing them recurse without bound.
inline constexpr int kMaxNesting = 200;
// Whether v nests deeper than `limit`; visits at most the nodes above that depth.
bool nests_deeper_than(const Value& v, int limit);

// Python's truth value, str() and repr() of the value (Undefined: false, "").
bool truthy(const Value& v);
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_float(double f);  // repr(float): shortest round trip, "1.0", "1e+20"
const char* type_name(const Value& v);

// Python ==, and < for numbers, strings and lists (else a RenderError).
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=(item_sep, key_sep)),
// indent < 0 = None.
// ensure_ascii escapes non-ASCII as \uXXXX; sort_keys orders dict keys.
std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                    bool ensure_ascii = false, bool sort_keys = false);

// Code points of a UTF-8 string (Python's str is indexed by them).
std::vector<std::string> code_points(const std::string& s);
size_t code_point_count(const std::string& s);

}  // namespace skim::jinja
