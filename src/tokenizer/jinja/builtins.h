// Jinja2's filters and tests, Python's str/dict methods, attribute and item lookup: the
// library a template calls into. Errors are RenderErrors (the interpreter adds the line).
#pragma once

#include <string>

#include "tokenizer/jinja/value.h"

namespace skim::jinja {

// raise_exception(message) from the template: its message is the error.
struct Raised : RenderError {
  using RenderError::RenderError;
};

// range, dict, namespace, raise_exception.
Dict global_functions();

bool is_filter(const std::string& name);
bool is_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// obj.name: a dict's methods, then its keys; str methods; a namespace's attributes.
// Undefined when absent (an error when obj is itself undefined).
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: dict keys, list and str indices (negative from the end), then attributes.
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python's iteration: a list's items, a dict's keys, a str's characters; Undefined is empty.
List iterate(const Value& v);
// Python's `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
size_t length(const Value& v);

}  // namespace skim::jinja
