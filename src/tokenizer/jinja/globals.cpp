// The functions every template sees, as transformers' environment has them: range, dict,
// namespace (no '_' attributes, as transformers' TemplateNamespace) and raise_exception.
#include "tokenizer/jinja/builtins.h"

namespace skim::jinja {

namespace {

Value builtin_range(CallArgs& a) {
  auto num = [&](size_t i) {
    if (!a.positional[i].is_int()) render_fail("range() takes integers");
    return a.positional[i].as_int();
  };
  if (a.positional.empty() || a.positional.size() > 3) render_fail("range() takes 1 to 3 arguments");
  const int64_t start = a.positional.size() > 1 ? num(0) : 0;
  const int64_t stop = a.positional.size() > 1 ? num(1) : num(0);
  const int64_t step = a.positional.size() > 2 ? num(2) : 1;
  if (step == 0) render_fail("range() arg 3 must not be zero");
  List l;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    check_list_size(l.size() + 1);
    l.push_back(Value(i));
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value(std::move(l));
}

// dict(**kw), dict(mapping, **kw); namespace(...) the same, as a namespace.
Value builtin_dict(CallArgs& a, bool is_namespace) {
  Value d = make_dict();
  d.as_dict().is_namespace = is_namespace;
  if (a.positional.size() > 1) render_fail("dict() takes at most one positional argument");
  if (!a.positional.empty()) {
    const Value& m = a.positional[0];
    if (m.is_dict()) {
      for (const auto& [k, v] : m.as_dict().items()) d.as_dict().set(k, v);
    } else {
      for (const Value& kv : iterate(m)) {
        const List pair = iterate(kv);
        if (pair.size() != 2 || !pair[0].is_string()) render_fail("dict() needs pairs of a string key and a value");
        d.as_dict().set(pair[0].as_string(), pair[1]);
      }
    }
  }
  for (const auto& [k, v] : a.keyword) d.as_dict().set(k, v);
  if (is_namespace)
    for (const auto& [k, v] : d.as_dict().items())
      if (!k.empty() && k[0] == '_') render_fail("a namespace's attribute may not start with '_'");
  return d;
}

}  // namespace

Dict global_functions() {
  Dict g;
  g.set("range", Value(Function{"range", builtin_range}));
  g.set("dict", Value(Function{"dict", [](CallArgs& a) { return builtin_dict(a, false); }}));
  g.set("namespace", Value(Function{"namespace", [](CallArgs& a) { return builtin_dict(a, true); }}));
  g.set("raise_exception", Value(Function{"raise_exception", [](CallArgs& a) -> Value {
          const Value* m = a.get(0, "message");
          throw Raised(m ? py_str(*m) : std::string("raise_exception"));
        }}));
  return g;
}

}  // namespace skim::jinja
