// Evaluates the parsed template: scopes as Jinja2 has them (a for loop's body gets a fresh
// scope each iteration, `if` none, a macro sees the template's top level at call time),
// Python's arithmetic, and the limits of Limits.
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <variant>

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/template.h"

namespace skim::jinja {

namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  const Scope* parent = nullptr;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

// a op b, or a RenderError when it overflows (Python's ints do not; skim's stop at 64 bits).
template <class Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) render_fail("integer overflow");
  return r;
}
bool add_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) render_fail("integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) render_fail("integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(const Value& seq, int64_t n) {
  n = std::max<int64_t>(0, n);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    check_size(s.size() * size_t(std::min<int64_t>(n, int64_t(1) << 40)));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const List& l = seq.as_list();
  check_list_size(l.size() * size_t(std::min<int64_t>(n, int64_t(1) << 40)));
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.begin(), l.end());
  return Value(std::move(out));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = py_str(a) + py_str(b);
    check_size(s.size());
    return Value(std::move(s));
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    check_size(a.as_string().size() + b.as_string().size());
    return Value(a.as_string() + b.as_string());
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    check_list_size(a.as_list().size() + b.as_list().size());
    List l = a.as_list();
    l.insert(l.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(l));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && b.is_int() && !b.is_bool()) return repeat(a, b.as_int());
  if (op == "*" && (b.is_string() || b.is_list()) && a.is_int() && !a.is_bool()) return repeat(b, a.as_int());
  if (!a.is_number() || !b.is_number())
    render_fail("unsupported operand types for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  const bool ints = a.is_int() && b.is_int();
  if (op == "/") {
    if (b.as_number() == 0) render_fail("division by zero");
    return Value(a.as_number() / b.as_number());
  }
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value(checked(add_overflow, x, y));
    if (op == "-") return Value(checked(sub_overflow, x, y));
    if (op == "*") return Value(checked(mul_overflow, x, y));
    if (op == "//") return Value(floor_div(x, y));
    if (op == "%") return Value(x - floor_div(x, y) * y);
    if (op == "**" && y >= 0) {
      if (x == 0 || x == 1) return Value(y == 0 ? int64_t(1) : x);
      if (x == -1) return Value(y % 2 ? int64_t(-1) : int64_t(1));
      int64_t p = 1;  // |x| >= 2: overflows within 63 steps
      for (int64_t i = 0; i < y; ++i) p = checked(mul_overflow, p, x);
      return Value(p);
    }
  }
  const double x = a.as_number(), y = b.as_number();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) render_fail("float division by zero");
  if (op == "//") return Value(std::floor(x / y));
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value(m);
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return !less(b, a);
  if (op == ">=") return !less(a, b);
  if (op == "in") return contains(b, a);
  return !contains(b, a);  // notin
}

class Interpreter {
 public:
  Interpreter(const Limits& limits, const Scope& root) : limits_(limits), root_(root) {}

  int line() const { return line_; }

  Flow exec(const Body& body, Scope& scope, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Value eval(const Expr& e, Scope& scope) {
    Nest n(*this, e.line);
    Value v = eval_node(e, scope);
    if (v.is_string()) step(v.as_string().size() / 64);
    return v;
  }

 private:
  // Counts nesting for the duration of one evaluation, and the line for errors.
  struct Nest {
    Interpreter& in;
    Nest(Interpreter& in, int line) : in(in) {
      if (++in.depth_ > in.limits_.max_eval_depth) render_fail("template evaluation nested too deeply");
      in.line_ = line;
      in.step(1);
    }
    ~Nest() { --in.depth_; }
  };

  void step(uint64_t n) {
    steps_ += n;
    if (steps_ > limits_.max_steps) render_fail("the template ran past its step limit (a loop too long?)");
  }

  void emit(std::string& out, const std::string& s) {
    check_size(out.size() + s.size());
    out += s;
  }

  Flow exec(const Stmt& s, Scope& scope, std::string& out) {
    Nest n(*this, s.line);
    switch (s.kind) {
      case Stmt::kText: emit(out, s.text); return Flow::kNormal;
      case Stmt::kOutput: emit(out, py_str(eval(*s.expr, scope))); return Flow::kNormal;
      case Stmt::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (truthy(eval(*s.conditions[i], scope))) return exec(s.bodies[i], scope, out);
        if (s.bodies.size() > s.conditions.size()) return exec(s.bodies.back(), scope, out);
        return Flow::kNormal;
      case Stmt::kFor: exec_for(s, scope, out); return Flow::kNormal;
      case Stmt::kSet: exec_set(s, scope); return Flow::kNormal;
      case Stmt::kSetBlock: {
        std::string block;
        exec(s.bodies[0], scope, block);
        scope.vars[s.targets[0]] = Value(std::move(block));
        return Flow::kNormal;
      }
      case Stmt::kMacro: define_macro(s, scope); return Flow::kNormal;
      case Stmt::kBreak: return Flow::kBreak;
      case Stmt::kContinue: return Flow::kContinue;
      case Stmt::kGeneration: return exec(s.bodies[0], scope, out);
    }
    return Flow::kNormal;
  }

  // Assigned values are what can grow across iterations (ns.x = [ns.x]): keep them shallow.
  static void check_nesting(const Value& v) {
    if (nests_deeper_than(v, kMaxNesting)) render_fail("a value nested deeper than " + std::to_string(kMaxNesting) + " levels");
  }

  void assign(Scope& scope, const std::vector<std::string>& targets, const Value& v) {
    check_nesting(v);
    if (targets.size() == 1) {
      scope.vars[targets[0]] = v;
      return;
    }
    const List items = iterate(v);
    if (items.size() != targets.size())
      render_fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
  }

  void exec_set(const Stmt& s, Scope& scope) {
    Value v = eval(*s.expr, scope);
    if (s.attribute.empty()) return assign(scope, s.targets, v);
    const Value* ns = scope.find(s.targets[0]);
    if (!ns || !ns->is_dict() || !ns->as_dict().is_namespace)
      render_fail("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    if (s.attribute[0] == '_') render_fail("a namespace's attribute may not start with '_'");
    check_nesting(v);
    ns->as_dict().set(s.attribute, std::move(v));
  }

  // The loop's items, filtered by `for ... if cond` (loop.length counts what is left).
  List loop_items(const Stmt& s, Scope& scope) {
    List all = iterate(eval(*s.expr, scope));
    if (!s.filter) return all;
    List kept;
    for (const Value& x : all) {
      step(1);
      Scope test{{}, &scope};
      assign(test, s.targets, x);
      if (truthy(eval(*s.filter, test))) kept.push_back(x);
    }
    return kept;
  }

  Value loop_object(const List& items, size_t i) {
    auto loop = std::make_shared<Dict>();
    const auto n = int64_t(items.size()), k = int64_t(i);
    loop->append_new("index", Value(k + 1));
    loop->append_new("index0", Value(k));
    loop->append_new("revindex", Value(n - k));
    loop->append_new("revindex0", Value(n - k - 1));
    loop->append_new("first", Value(k == 0));
    loop->append_new("last", Value(k == n - 1));
    loop->append_new("length", Value(n));
    loop->append_new("depth", Value(1));
    loop->append_new("depth0", Value(0));
    loop->append_new("previtem", i > 0 ? items[i - 1] : Value::undefined("previtem"));
    loop->append_new("nextitem", i + 1 < items.size() ? items[i + 1] : Value::undefined("nextitem"));
    loop->append_new("cycle", Value(Function{"cycle", [k](CallArgs& a) {
                                        if (a.positional.empty()) render_fail("loop.cycle needs at least one value");
                                        return a.positional[size_t(k) % a.positional.size()];
                                      }}));
    return Value(std::move(loop));
  }

  void exec_for(const Stmt& s, Scope& scope, std::string& out) {
    const List items = loop_items(s, scope);
    Scope body{{}, &scope};
    for (size_t i = 0; i < items.size(); ++i) {
      step(1);
      body.vars.clear();  // fresh each iteration, as Jinja2's
      if (s.uses_loop) body.vars["loop"] = loop_object(items, i);
      assign(body, s.targets, items[i]);
      if (exec(s.bodies[0], body, out) == Flow::kBreak) break;
    }
    if (items.empty() && s.bodies.size() > 1) {
      Scope body{{}, &scope};
      exec(s.bodies[1], body, out);
    }
  }

  void define_macro(const Stmt& s, Scope& scope) {
    const Stmt* m = &s;
    scope.vars[s.targets[0]] = Value(Function{s.targets[0], [this, m](CallArgs& a) { return call_macro(*m, a); }});
  }

  Value call_macro(const Stmt& m, CallArgs& a) {
    if (a.positional.size() > m.params.size())
      render_fail("macro '" + m.targets[0] + "' takes " + std::to_string(m.params.size()) + " arguments, got " +
                  std::to_string(a.positional.size()));
    for (const auto& [k, v] : a.keyword)
      if (std::find(m.params.begin(), m.params.end(), k) == m.params.end())
        render_fail("macro '" + m.targets[0] + "' has no parameter '" + k + "'");
    Scope local{{}, &root_};
    for (size_t i = 0; i < m.params.size(); ++i) {
      const Value* given = a.get(i, m.params[i].c_str());
      if (given) local.vars[m.params[i]] = *given;
      else if (m.defaults[i]) local.vars[m.params[i]] = eval(*m.defaults[i], local);
      else local.vars[m.params[i]] = Value::undefined(m.params[i]);
    }
    std::string out;
    exec(m.bodies[0], local, out);
    return Value(std::move(out));
  }

  CallArgs call_args(const Expr& e, Scope& scope) {
    CallArgs a;
    for (size_t i = 1; i < e.args.size(); ++i) {
      Value v = eval(*e.args[i], scope);
      if (e.names[i - 1].empty()) a.positional.push_back(std::move(v));
      else a.keyword.emplace_back(e.names[i - 1], std::move(v));
    }
    return a;
  }

  Value eval_node(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case Expr::kLiteral: return e.value;
      case Expr::kName: {
        const Value* v = scope.find(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::kList: {
        List l;
        for (const auto& x : e.args) l.push_back(eval(*x, scope));
        return e.negated ? Value::tuple(std::move(l)) : Value(std::move(l));
      }
      case Expr::kDict: {
        Value d = make_dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i], scope);
          if (!k.is_string()) render_fail("skim's templates support string dict keys only");
          d.as_dict().set(k.as_string(), eval(*e.args[i + 1], scope));
        }
        return d;
      }
      case Expr::kAttr: return get_attr(eval(*e.args[0], scope), e.name);
      case Expr::kItem: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::kSlice: {
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], scope) : Value(None{}); };
        const Value obj = eval(*e.args[0], scope);
        return slice(obj, part(1), part(2), part(3));
      }
      case Expr::kCall: return call(e, scope);
      case Expr::kFilter: {
        const Value in = eval(*e.args[0], scope);
        return apply_filter(e.name, in, call_args(e, scope));
      }
      case Expr::kTest: {
        const Value in = eval(*e.args[0], scope);
        return Value(apply_test(e.name, in, call_args(e, scope)) != e.negated);
      }
      case Expr::kNot: return Value(!truthy(eval(*e.args[0], scope)));
      case Expr::kNeg:
      case Expr::kPos: return sign(e, eval(*e.args[0], scope));
      case Expr::kBinary: return arithmetic(e.name, eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::kAnd: {
        Value a = eval(*e.args[0], scope);
        return truthy(a) ? eval(*e.args[1], scope) : a;
      }
      case Expr::kOr: {
        Value a = eval(*e.args[0], scope);
        return truthy(a) ? a : eval(*e.args[1], scope);
      }
      case Expr::kCompare: {
        Value left = eval(*e.args[0], scope);
        for (size_t i = 0; i < e.names.size(); ++i) {
          Value right = eval(*e.args[i + 1], scope);
          if (!compare(e.names[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::kCondition:
        if (truthy(eval(*e.args[0], scope))) return eval(*e.args[1], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("");
    }
    return Value();
  }

  static Value sign(const Expr& e, const Value& v) {
    if (!v.is_number()) render_fail(std::string("bad operand type for unary ") + (e.kind == Expr::kNeg ? "-" : "+") + ": '" + type_name(v) + "'");
    if (e.kind == Expr::kPos) return v.is_bool() ? Value(v.as_int()) : v;
    if (v.is_float()) return Value(-v.as_number());
    if (v.as_int() == INT64_MIN) render_fail("integer overflow");
    return Value(-v.as_int());
  }

  Value call(const Expr& e, Scope& scope) {
    const Value f = eval(*e.args[0], scope);
    if (!f.is_function()) {
      if (f.is_undefined()) render_fail("'" + f.undefined_name() + "' is undefined (called as a function)");
      render_fail(std::string("'") + type_name(f) + "' object is not callable");
    }
    CallArgs a = call_args(e, scope);
    const int line = line_;
    Value r = f.as_function().call(a);
    line_ = line;
    return r;
  }

  const Limits& limits_;
  const Scope& root_;
  int line_ = 0;
  int depth_ = 0;
  uint64_t steps_ = 0;
};

// Sets the size limit for this thread's render and puts the old one back after.
struct SizeLimit {
  explicit SizeLimit(size_t n) { set_size_limit(n); }
  ~SizeLimit() { set_size_limit(size_t(32) << 20); }
};

}  // namespace

Template::Template(const std::string& text, std::string source, Limits limits)
    : source_(std::move(source)), limits_(limits),
      body_(std::make_shared<const Body>(parse_template(text, source_, limits.max_depth))) {}

std::string Template::render(const Dict& variables) const {
  SizeLimit size(limits_.max_size);
  Scope builtins;
  const Dict globals = global_functions();
  for (const auto& [k, v] : globals.items()) builtins.vars[k] = v;
  Scope root{{}, &builtins};
  for (const auto& [k, v] : variables.items()) root.vars[k] = v;
  Scope top{{}, &root};  // the template's own top-level names; macros see them at call time
  Interpreter in(limits_, top);
  std::string out;
  try {
    in.exec(*body_, top, out);
  } catch (const Raised& e) {
    fail("{}:{}: raise_exception: {}", source_, in.line(), e.what());
  } catch (const RenderError& e) {
    fail("{}:{}: {}", source_, in.line(), e.what());
  } catch (const std::bad_alloc&) {
    fail("{}:{}: out of memory rendering the template", source_, in.line());
  } catch (const std::bad_variant_access&) {
    fail("{}:{}: a value of the wrong type", source_, in.line());
  }
  return out;
}

}  // namespace skim::jinja
