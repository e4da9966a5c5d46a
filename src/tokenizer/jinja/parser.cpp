#include "tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"

namespace skim::jinja {

namespace {

ExprPtr node(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

// Recursive descent over one tag's tokens, following the precedence of jinja2/parser.py.
class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, const std::string& source, int max_depth)
      : t_(std::move(tokens)), source_(source), max_depth_(max_depth) {}

  [[noreturn]] void error(const std::string& message) const {
    fail("{}:{}: {}", source_, peek().line, message);
  }
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  bool at_end() const { return peek().kind == Token::kEnd; }
  bool is_op(const char* op, size_t ahead = 0) const { return peek(ahead).kind == Token::kOp && peek(ahead).text == op; }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::kName && peek(ahead).text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got '" + peek().text + "'");
  }
  std::string expect_name() {
    if (peek().kind != Token::kName) error("expected a name, got '" + peek().text + "'");
    return t_[i_++].text;
  }
  void expect_end() {
    if (!at_end()) error("unexpected '" + peek().text + "' (expected the end of the tag)");
  }

  // expr (',' expr)* as a list when there is a comma (Python tuples).
  ExprPtr tuple(bool with_condition = true) {
    const int line = peek().line;
    ExprPtr first = with_condition ? expression() : or_expr();
    if (!is_op(",")) return first;
    ExprPtr list = node(Expr::kList, line);
    list->negated = true;  // a tuple
    list->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (at_end() || is_op(")") || is_name("if")) break;
      list->args.push_back(with_condition ? expression() : or_expr());
    }
    return list;
  }

  ExprPtr expression() {
    Depth d(*this);
    ExprPtr e = or_expr();
    while (is_name("if")) {
      const int line = peek().line;
      ++i_;
      ExprPtr c = node(Expr::kCondition, line);
      c->args.push_back(or_expr());
      c->args.push_back(std::move(e));
      c->args.push_back(skip_name("else") ? expression() : nullptr);
      e = std::move(c);
    }
    return e;
  }

 private:
  struct Depth {
    ExprParser& p;
    explicit Depth(ExprParser& p) : p(p) {
      if (++p.depth_ > p.max_depth_) p.error("expression nested too deeply");
    }
    ~Depth() { --p.depth_; }
  };

  ExprPtr binary_chain(Expr::Kind kind, const char* word, ExprPtr (ExprParser::*next)()) {
    ExprPtr e = (this->*next)();
    while (is_name(word)) {
      ExprPtr b = node(kind, peek().line);
      ++i_;
      b->args.push_back(std::move(e));
      b->args.push_back((this->*next)());
      e = std::move(b);
    }
    return e;
  }
  ExprPtr or_expr() { return binary_chain(Expr::kOr, "or", &ExprParser::and_expr); }
  ExprPtr and_expr() { return binary_chain(Expr::kAnd, "and", &ExprParser::not_expr); }
  ExprPtr not_expr() {
    if (!is_name("not")) return compare();
    Depth d(*this);
    ExprPtr n = node(Expr::kNot, peek().line);
    ++i_;
    n->args.push_back(not_expr());
    return n;
  }

  ExprPtr compare() {
    ExprPtr first = math1();
    ExprPtr c;
    static const std::set<std::string> kOps = {"==", "!=", "<", ">", "<=", ">="};
    for (;;) {
      std::string op;
      if (peek().kind == Token::kOp && kOps.count(peek().text)) op = peek().text, ++i_;
      else if (is_name("in")) op = "in", ++i_;
      else if (is_name("not") && is_name("in", 1)) op = "notin", i_ += 2;
      else break;
      if (!c) {
        c = node(Expr::kCompare, first->line);
        c->args.push_back(std::move(first));
      }
      c->names.push_back(op);
      c->args.push_back(math1());
    }
    return c ? std::move(c) : std::move(first);
  }

  ExprPtr ops(std::initializer_list<const char*> list, ExprPtr (ExprParser::*next)()) {
    ExprPtr e = (this->*next)();
    for (;;) {
      const char* found = nullptr;
      for (const char* o : list)
        if (is_op(o)) found = o;
      if (!found) return e;
      ExprPtr b = node(Expr::kBinary, peek().line);
      ++i_;
      b->name = found;
      b->args.push_back(std::move(e));
      b->args.push_back((this->*next)());
      e = std::move(b);
    }
  }
  ExprPtr math1() { return ops({"+", "-"}, &ExprParser::concat); }
  ExprPtr concat() { return ops({"~"}, &ExprParser::math2); }
  ExprPtr math2() { return ops({"*", "/", "//", "%"}, &ExprParser::power); }
  ExprPtr power() { return ops({"**"}, &ExprParser::unary_with_filter); }
  ExprPtr unary_with_filter() { return unary(true); }

  ExprPtr unary(bool with_filter) {
    Depth d(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? Expr::kNeg : Expr::kPos, peek().line);
      ++i_;
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    return with_filter ? filters_and_tests(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& tk = peek();
    const int line = tk.line;
    if (tk.kind == Token::kName) {
      ++i_;
      ExprPtr e = node(Expr::kLiteral, line);
      if (tk.text == "true" || tk.text == "True") e->value = Value(true);
      else if (tk.text == "false" || tk.text == "False") e->value = Value(false);
      else if (tk.text == "none" || tk.text == "None") e->value = Value(None{});
      else e->kind = Expr::kName, e->name = tk.text;
      return e;
    }
    if (tk.kind == Token::kString) {
      std::string s;
      while (peek().kind == Token::kString) s += t_[i_++].text;
      ExprPtr e = node(Expr::kLiteral, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (tk.kind == Token::kInt || tk.kind == Token::kFloat) return number();
    if (skip_op("(")) {
      if (skip_op(")")) {  // ()
        ExprPtr empty = node(Expr::kList, line);
        empty->negated = true;
        return empty;
      }
      ExprPtr e = tuple();
      expect_op(")");
      return e;
    }
    if (skip_op("[")) return sequence(Expr::kList, "]", line);
    if (skip_op("{")) return sequence(Expr::kDict, "}", line);
    error("unexpected '" + tk.text + "'" + (tk.kind == Token::kEnd ? " (end of the tag)" : ""));
  }

  ExprPtr number() {
    const Token& tk = t_[i_++];
    ExprPtr e = node(Expr::kLiteral, tk.line);
    if (tk.kind == Token::kFloat) {
      e->value = Value(std::strtod(tk.text.c_str(), nullptr));
      return e;
    }
    int64_t v = 0;
    auto r = std::from_chars(tk.text.data(), tk.text.data() + tk.text.size(), v);
    if (r.ec != std::errc()) error("integer literal " + tk.text + " is too large");
    e->value = Value(v);
    return e;
  }

  // [a, b] or {k: v, ...}; trailing commas allowed.
  ExprPtr sequence(Expr::Kind kind, const char* close, int line) {
    ExprPtr e = node(kind, line);
    while (!skip_op(close)) {
      if (!e->args.empty()) {
        expect_op(",");
        if (skip_op(close)) break;
      }
      e->args.push_back(expression());
      if (kind == Expr::kDict) {
        expect_op(":");
        e->args.push_back(expression());
      }
    }
    return e;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = peek().line;
      if (skip_op(".")) {
        if (peek().kind == Token::kInt) {
          ExprPtr item = node(Expr::kItem, line);
          item->args.push_back(std::move(e));
          item->args.push_back(number());
          e = std::move(item);
        } else {
          ExprPtr a = node(Expr::kAttr, line);
          a->name = expect_name();
          a->args.push_back(std::move(e));
          e = std::move(a);
        }
      } else if (skip_op("[")) {
        e = subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    for (;;) {
      if (!is_op(":") && !is_op("]")) parts[n] = expression();
      if (skip_op(":")) {
        slice = true;
        if (++n > 2) error("a slice has at most three parts");
        continue;
      }
      expect_op("]");
      break;
    }
    ExprPtr e = node(slice ? Expr::kSlice : Expr::kItem, line);
    e->args.push_back(std::move(target));
    if (!slice && !parts[0]) error("empty subscript");
    for (int k = 0; k < (slice ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
    return e;
  }

  // (args) after `callee`, into a kCall node (or the given node's args/names).
  void call_args(Expr& into) {
    expect_op("(");
    const size_t base = into.args.size();
    while (!skip_op(")")) {
      if (into.args.size() > base) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      if (is_op("*") || is_op("**")) error("*args and **kwargs are not supported");
      std::string name;
      if (peek().kind == Token::kName && is_op("=", 1)) {
        name = t_[i_].text;
        i_ += 2;
      } else if (!into.names.empty() && !into.names.back().empty()) {
        error("positional argument after a keyword argument");
      }
      into.names.push_back(name);
      into.args.push_back(expression());
    }
  }

  ExprPtr call(ExprPtr callee) {
    ExprPtr c = node(Expr::kCall, peek().line);
    c->args.push_back(std::move(callee));
    call_args(*c);
    return c;
  }

  ExprPtr filters_and_tests(ExprPtr e) {
    for (;;) {
      const int line = peek().line;
      if (skip_op("|")) {
        ExprPtr f = node(Expr::kFilter, line);
        f->name = expect_name();
        if (!is_filter(f->name)) fail("{}:{}: unknown filter '{}'", source_, line, f->name);
        f->args.push_back(std::move(e));
        if (is_op("(")) call_args(*f);
        e = std::move(f);
      } else if (skip_name("is")) {
        ExprPtr t = node(Expr::kTest, line);
        t->negated = skip_name("not");
        if (is_name("none") || is_name("true") || is_name("false")) t->name = t_[i_++].text;
        else if (peek().kind == Token::kOp && (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">=")))
          t->name = t_[i_++].text;
        else t->name = expect_name();
        if (!is_test(t->name)) fail("{}:{}: unknown test '{}'", source_, line, t->name);
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          call_args(*t);
        } else if (test_argument_follows()) {
          t->names.push_back("");
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // `x is divisibleby 3`: a test takes one bare argument when a value starts next.
  bool test_argument_follows() const {
    const Token& n = peek();
    if (n.kind == Token::kName) return n.text != "else" && n.text != "or" && n.text != "and" && n.text != "is";
    return n.kind == Token::kString || n.kind == Token::kInt || n.kind == Token::kFloat || is_op("[") || is_op("{");
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  const std::string& source_;
  int max_depth_;
  int depth_ = 0;
};

// Statements over the segments, with nesting of blocks.
class StmtParser {
 public:
  StmtParser(std::vector<Segment> segs, const std::string& source, int max_depth)
      : segs_(std::move(segs)), source_(source), max_depth_(max_depth) {}

  Body parse_all() {
    Body body = parse_body({});
    if (i_ < segs_.size()) fail("{}:{}: unexpected '{{% {} %}}'", source_, segs_[i_].line, keyword_);
    return body;
  }

 private:
  struct Tag {
    ExprParser p;
    std::string keyword;
    int line;
  };

  Tag open_tag(const Segment& s) {
    ExprParser p(tokenize(s.text, s.line, source_), source_, max_depth_);
    if (p.peek().kind != Token::kName) p.error("expected a statement name in '{% " + s.text + " %}'");
    std::string kw = p.expect_name();
    return {std::move(p), kw, s.line};
  }

  // Statements until one of `ends` (left at segs_[i_], its keyword in keyword_) or the end.
  Body parse_body(const std::set<std::string>& ends) {
    if (++depth_ > max_depth_) fail("{}:{}: blocks nested too deeply", source_, line());
    Body body;
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_];
      if (s.kind == Segment::kText) {
        body.push_back(text(s));
        ++i_;
      } else if (s.kind == Segment::kExpr) {
        body.push_back(output(s));
        ++i_;
      } else {
        Tag tag = open_tag(s);
        if (ends.count(tag.keyword) || is_end_word(tag.keyword)) {
          keyword_ = tag.keyword;
          break;
        }
        ++i_;
        body.push_back(statement(tag));
      }
    }
    --depth_;
    return body;
  }

  static bool is_end_word(const std::string& k) {
    return k.rfind("end", 0) == 0 || k == "else" || k == "elif";
  }
  int line() const { return i_ < segs_.size() ? segs_[i_].line : (segs_.empty() ? 1 : segs_.back().line); }

  // After parse_body: the closing tag must be `word`.
  Tag close(const std::set<std::string>& words, const char* opened, int opened_line) {
    if (i_ >= segs_.size())
      fail("{}:{}: '{{% {} %}}' is never closed", source_, opened_line, opened);
    Tag tag = open_tag(segs_[i_]);
    if (!words.count(tag.keyword))
      fail("{}:{}: unexpected '{{% {} %}}' inside '{{% {} %}}' of line {}", source_, tag.line, tag.keyword, opened, opened_line);
    ++i_;
    return tag;
  }

  std::unique_ptr<Stmt> make(Stmt::Kind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  std::unique_ptr<Stmt> text(const Segment& seg) {
    auto s = make(Stmt::kText, seg.line);
    s->text = seg.text;
    return s;
  }

  std::unique_ptr<Stmt> output(const Segment& seg) {
    ExprParser p(tokenize(seg.text, seg.line, source_), source_, max_depth_);
    auto s = make(Stmt::kOutput, seg.line);
    s->expr = p.tuple();
    p.expect_end();
    return s;
  }

  std::unique_ptr<Stmt> statement(Tag& tag) {
    const std::string& k = tag.keyword;
    if (k == "if") return if_stmt(tag);
    if (k == "for") return for_stmt(tag);
    if (k == "set") return set_stmt(tag);
    if (k == "macro") return macro_stmt(tag);
    if (k == "generation") {
      tag.p.expect_end();
      auto s = make(Stmt::kGeneration, tag.line);
      s->bodies.push_back(parse_body({"endgeneration"}));
      close({"endgeneration"}, "generation", tag.line).p.expect_end();
      return s;
    }
    if (k == "break" || k == "continue") {
      if (loops_ == 0) fail("{}:{}: '{{% {} %}}' outside a loop", source_, tag.line, k);
      tag.p.expect_end();
      return make(k == "break" ? Stmt::kBreak : Stmt::kContinue, tag.line);
    }
    fail("{}:{}: unsupported tag '{{% {} %}}' (skim's chat templates support if, for, set, macro, "
         "break, continue, generation, raw)",
         source_, tag.line, k);
  }

  std::unique_ptr<Stmt> if_stmt(Tag& tag) {
    auto s = make(Stmt::kIf, tag.line);
    s->conditions.push_back(tag.p.expression());
    tag.p.expect_end();
    for (;;) {
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      Tag next = close({"elif", "else", "endif"}, "if", tag.line);
      if (next.keyword == "elif") {
        s->conditions.push_back(next.p.expression());
        next.p.expect_end();
        continue;
      }
      next.p.expect_end();
      if (next.keyword == "else") {
        s->bodies.push_back(parse_body({"endif"}));
        close({"endif"}, "if", tag.line).p.expect_end();
      }
      return s;
    }
  }

  std::vector<std::string> targets(ExprParser& p) {
    std::vector<std::string> names;
    const bool paren = p.skip_op("(");
    do names.push_back(p.expect_name());
    while (p.skip_op(","));
    if (paren) p.expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> for_stmt(Tag& tag) {
    auto s = make(Stmt::kFor, tag.line);
    s->targets = targets(tag.p);
    if (!tag.p.skip_name("in")) tag.p.error("expected 'in' in a for loop");
    s->expr = tag.p.tuple(false);
    if (tag.p.skip_name("if")) s->filter = tag.p.expression();
    if (tag.p.is_name("recursive")) tag.p.error("recursive loops are not supported");
    tag.p.expect_end();
    ++loops_;
    const size_t first_segment = i_;
    s->bodies.push_back(parse_body({"else", "endfor"}));
    s->uses_loop = mentions_loop(first_segment, i_);
    --loops_;
    Tag next = close({"else", "endfor"}, "for", tag.line);
    next.p.expect_end();
    if (next.keyword == "else") {
      s->bodies.push_back(parse_body({"endfor"}));
      close({"endfor"}, "for", tag.line).p.expect_end();
    }
    return s;
  }

  // Whether the code of segments [from, to) names `loop` (a cheap, conservative check).
  bool mentions_loop(size_t from, size_t to) const {
    for (size_t k = from; k < to && k < segs_.size(); ++k) {
      if (segs_[k].kind == Segment::kText) continue;
      for (const Token& t : tokenize(segs_[k].text, segs_[k].line, source_))
        if (t.kind == Token::kName && t.text == "loop") return true;
    }
    return false;
  }

  std::unique_ptr<Stmt> set_stmt(Tag& tag) {
    auto s = make(Stmt::kSet, tag.line);
    s->targets.push_back(tag.p.expect_name());
    if (tag.p.skip_op(".")) s->attribute = tag.p.expect_name();
    while (s->attribute.empty() && tag.p.skip_op(",")) s->targets.push_back(tag.p.expect_name());
    if (tag.p.skip_op("=")) {
      s->expr = tag.p.tuple();
      tag.p.expect_end();
      return s;
    }
    if (!tag.p.at_end()) tag.p.error("expected '=' or the end of the tag in set");
    if (s->targets.size() != 1 || !s->attribute.empty()) tag.p.error("a block set assigns one name");
    s->kind = Stmt::kSetBlock;
    s->bodies.push_back(parse_body({"endset"}));
    close({"endset"}, "set", tag.line).p.expect_end();
    return s;
  }

  std::unique_ptr<Stmt> macro_stmt(Tag& tag) {
    auto s = make(Stmt::kMacro, tag.line);
    s->targets.push_back(tag.p.expect_name());
    tag.p.expect_op("(");
    while (!tag.p.skip_op(")")) {
      if (!s->params.empty()) tag.p.expect_op(",");
      if (tag.p.skip_op(")")) break;
      s->params.push_back(tag.p.expect_name());
      s->defaults.push_back(tag.p.skip_op("=") ? tag.p.expression() : nullptr);
    }
    tag.p.expect_end();
    const int loops = loops_;
    loops_ = 0;  // a macro's body is not inside the loop around its definition
    s->bodies.push_back(parse_body({"endmacro"}));
    loops_ = loops;
    close({"endmacro"}, "macro", tag.line).p.expect_end();
    return s;
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  const std::string& source_;
  int max_depth_;
  int depth_ = 0;
  int loops_ = 0;
  std::string keyword_;
};

}  // namespace

Body parse_template(const std::string& text, const std::string& source, int max_depth) {
  return StmtParser(split_template(text, source), source, max_depth).parse_all();
}

}  // namespace skim::jinja
