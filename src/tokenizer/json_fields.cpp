#include "tokenizer/json_fields.h"

#include "core/error.h"

namespace skim::tok {

namespace {
const nlohmann::json& null_json() {
  static const nlohmann::json null_value;
  return null_value;
}
}  // namespace

void JsonAt::fail(std::string_view why) const {
  skim::fail("{}: field '{}': {}", source_, path_.empty() ? "(root)" : path_, why);
}

bool JsonAt::has(std::string_view key) const {
  if (!value_.is_object()) return false;
  auto it = value_.find(key);
  return it != value_.end() && !it->is_null();
}

JsonAt JsonAt::at(std::string_view key) const {
  std::string child = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  if (!value_.is_object()) fail("expected an object");
  auto it = value_.find(key);
  if (it == value_.end()) skim::fail("{}: field '{}' is missing", source_, child);
  return JsonAt(*it, source_, std::move(child));
}

JsonAt JsonAt::get_or_null(std::string_view key) const {
  std::string child = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  if (!value_.is_object()) return JsonAt(null_json(), source_, std::move(child));
  auto it = value_.find(key);
  return JsonAt(it == value_.end() ? null_json() : *it, source_, std::move(child));
}

JsonAt JsonAt::at(size_t index) const {
  if (!value_.is_array() || index >= value_.size()) fail("expected an array element");
  return JsonAt(value_[index], source_, path_ + "[" + std::to_string(index) + "]");
}

size_t JsonAt::size() const {
  if (!value_.is_array()) fail("expected an array");
  return value_.size();
}

std::string JsonAt::str() const {
  if (!value_.is_string()) fail("expected a string");
  return value_.get<std::string>();
}

bool JsonAt::boolean() const {
  if (!value_.is_boolean()) fail("expected true or false");
  return value_.get<bool>();
}

int64_t JsonAt::integer() const {
  if (!value_.is_number_integer()) fail("expected an integer");
  return value_.get<int64_t>();
}

std::string JsonAt::str(std::string_view key, std::string_view fallback) const {
  return has(key) ? at(key).str() : std::string(fallback);
}

bool JsonAt::boolean(std::string_view key, bool fallback) const {
  return has(key) ? at(key).boolean() : fallback;
}

}  // namespace skim::tok
