// Python's str and dict methods that chat templates call (message.content.strip(),
// message.get('x'), tools.items()), as bound functions; and the str helpers filters share.
#pragma once

#include <string>

#include "tokenizer/jinja/value.h"

namespace skim::jinja {

// obj.name as a callable bound to obj, or Undefined when obj has no such method.
Value bound_method(const Value& obj, const std::string& name);

// Python's str.strip family (chars null: whitespace), case mapping (ASCII letters only) and
// str.replace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string py_upper(std::string s);
std::string py_lower(std::string s);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
List py_split(const std::string& s, const Value* sep, int64_t maxsplit);

}  // namespace skim::jinja
