#include "tokenizer/jinja/lexer.h"

#include <cctype>
#include <cstring>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace skim::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Jinja2 reads every newline sequence as "\n" and, without keep_trailing_newline, drops one
// final newline.
std::string normalise_newlines(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out += in[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The end of a tag opened at `from`: the closing delimiter outside string literals and
// brackets (as Jinja2's lexer balances them: `{{ {'a': {}}}}` closes at the last "}}").
size_t find_close(const std::string& t, size_t from, const char* close, bool code) {
  int depth = 0;
  for (size_t i = from; i + 1 < t.size(); ++i) {
    const char c = t[i];
    if (code && (c == '\'' || c == '"')) {
      for (++i; i < t.size() && t[i] != c; ++i)
        if (t[i] == '\\') ++i;
      continue;
    }
    if (depth == 0 && c == close[0] && t[i + 1] == close[1]) return i;
    if (!code) continue;
    if (c == '(' || c == '[' || c == '{') ++depth;
    else if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
  }
  return std::string::npos;
}

struct Splitter {
  const std::string& t;
  const std::string& source;
  std::vector<Segment> out;
  std::string pending;  // text since the last tag
  int pending_line = 1;
  int line = 1;
  size_t counted = 0;          // t[0, counted) has been counted into `line`
  bool line_starting = true;   // the last tag's end consumed a newline (lstrip_blocks)

  int line_at(size_t pos) {
    for (; counted < pos; ++counted) line += t[counted] == '\n';
    return line;
  }

  void flush_text() {
    if (!pending.empty()) out.push_back({Segment::kText, pending, pending_line});
    pending.clear();
  }

  // Whitespace before a tag: '-' strips all of it; lstrip_blocks strips a block or comment
  // tag's indentation when only spaces and tabs stand between the line start and the tag.
  void strip_before(char marker, bool block_like) {
    if (marker == '-') {
      while (!pending.empty() && is_space(pending.back())) pending.pop_back();
      return;
    }
    if (!block_like || marker == '+') return;
    const size_t nl = pending.rfind('\n');
    const size_t from = nl == std::string::npos ? 0 : nl + 1;
    if (from == 0 && !line_starting) return;
    if (from == pending.size()) return;
    for (size_t i = from; i < pending.size(); ++i)
      if (pending[i] != ' ' && pending[i] != '\t') return;
    pending.erase(from);
  }

  // Whitespace after a tag: '-' skips all of it; trim_blocks drops the newline right after a
  // block or comment tag.
  size_t skip_after(size_t pos, char marker, bool block_like) {
    const size_t start = pos;
    if (marker == '-') {
      while (pos < t.size() && is_space(t[pos])) ++pos;
    } else if (block_like && marker != '+' && pos < t.size() && t[pos] == '\n') {
      ++pos;
    }
    line_starting = pos > start && t[pos - 1] == '\n';
    return pos;
  }

  // {% raw %}: the text up to {% endraw %} as it stands.
  size_t raw_block(size_t pos) {
    for (size_t p = t.find("{%", pos); p != std::string::npos; p = t.find("{%", p + 2)) {
      size_t q = p + 2;
      const char open_marker = q < t.size() ? t[q] : 0;
      if (open_marker == '-' || open_marker == '+') ++q;
      while (q < t.size() && is_space(t[q])) ++q;
      if (t.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < t.size() && is_space(t[q])) ++q;
      char close_marker = 0;
      if (q < t.size() && (t[q] == '-' || t[q] == '+')) close_marker = t[q++];
      if (t.compare(q, 2, "%}") != 0) continue;
      pending += t.substr(pos, p - pos);
      strip_before(open_marker, true);
      return skip_after(q + 2, close_marker, true);
    }
    fail("{}:{}: {{% raw %}} without {{% endraw %}}", source, line_at(pos));
  }

  void run() {
    size_t pos = 0;
    while (pos < t.size()) {
      const size_t open = t.find('{', pos);
      const char kind = open == std::string::npos || open + 1 >= t.size() ? 0 : t[open + 1];
      if (kind != '{' && kind != '%' && kind != '#') {
        const size_t end = open == std::string::npos ? t.size() : open + 1;
        if (pending.empty()) pending_line = line_at(pos);
        pending += t.substr(pos, end - pos);
        pos = end;
        continue;
      }
      if (pending.empty()) pending_line = line_at(pos);
      pending += t.substr(pos, open - pos);
      pos = tag(open, kind);
    }
    flush_text();
  }

  // One tag at `open`; returns where the text after it starts.
  size_t tag(size_t open, char kind) {
    const int tag_line = line_at(open);
    const bool block_like = kind != '{';
    size_t code_from = open + 2;
    const char open_marker = code_from < t.size() ? t[code_from] : 0;
    if (open_marker == '-' || (open_marker == '+' && block_like)) ++code_from;
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = find_close(t, code_from, close, kind != '#');
    if (end == std::string::npos)
      fail("{}:{}: unclosed '{}{}' (no '{}')", source, tag_line, '{', kind, close);
    size_t code_to = end;
    const char close_marker = end > code_from && (t[end - 1] == '-' || (t[end - 1] == '+' && block_like)) ? t[end - 1] : 0;
    if (close_marker) --code_to;
    strip_before(open_marker, block_like);
    const size_t after = skip_after(end + 2, close_marker, block_like);
    if (kind == '#') return after;
    std::string code = t.substr(code_from, code_to - code_from);
    size_t a = 0, b = code.size();
    while (a < b && is_space(code[a])) ++a;
    while (b > a && is_space(code[b - 1])) --b;
    if (kind == '%' && code.substr(a, b - a) == "raw") {
      if (pending.empty()) pending_line = line_at(after);
      return raw_block(after);
    }
    flush_text();
    out.push_back({kind == '{' ? Segment::kExpr : Segment::kStmt, code, tag_line});
    pending_line = line_at(after);
    return after;
  }
};

// Python string-literal escapes, as Jinja2 decodes them.
std::string unescape(const std::string& code, size_t& i, char quote, int line, const std::string& source) {
  std::string out;
  for (++i; i < code.size() && code[i] != quote; ++i) {
    if (code[i] != '\\' || i + 1 >= code.size()) {
      out += code[i];
      continue;
    }
    const char e = code[++i];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        const std::string hex = code.substr(i + 1, n);
        if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
          fail("{}:{}: bad \\{} escape in a string", source, line, e);
        const unsigned long cp = std::stoul(hex, nullptr, 16);
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("{}:{}: bad code point in a string", source, line);
        tok::utf8_append(out, char32_t(cp));
        i += n;
        break;
      }
      default: out += '\\'; out += e;  // Python keeps unknown escapes as written
    }
  }
  if (i >= code.size()) fail("{}:{}: unterminated string literal", source, line);
  return out;
}

}  // namespace

std::vector<Segment> split_template(const std::string& text, const std::string& source) {
  const std::string t = normalise_newlines(text);
  Splitter s{t, source, {}, {}};
  s.run();
  return std::move(s.out);
}

std::vector<Token> tokenize(const std::string& code, int line, const std::string& source) {
  std::vector<Token> out;
  static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
  size_t i = 0;
  while (i < code.size()) {
    const char c = code[i];
    if (is_space(c)) {
      line += c == '\n';
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < code.size() && (std::isalnum(static_cast<unsigned char>(code[j])) || code[j] == '_')) ++j;
      out.push_back({Token::kName, code.substr(i, j - i), line});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      auto digits = [&] {
        while (j < code.size() && (std::isdigit(static_cast<unsigned char>(code[j])) || code[j] == '_')) ++j;
      };
      digits();
      bool is_float = false;
      if (j + 1 < code.size() && code[j] == '.' && std::isdigit(static_cast<unsigned char>(code[j + 1]))) {
        ++j;
        digits();
        is_float = true;
      }
      if (j < code.size() && (code[j] == 'e' || code[j] == 'E')) {
        size_t k = j + 1;
        if (k < code.size() && (code[k] == '+' || code[k] == '-')) ++k;
        if (k < code.size() && std::isdigit(static_cast<unsigned char>(code[k]))) {
          j = k;
          digits();
          is_float = true;
        }
      }
      std::string num;
      for (size_t k = i; k < j; ++k)
        if (code[k] != '_') num += code[k];
      out.push_back({is_float ? Token::kFloat : Token::kInt, num, line});
      i = j;
    } else if (c == '\'' || c == '"') {
      const int at = line;
      std::string s = unescape(code, i, c, line, source);
      for (char x : s) line += x == '\n';
      out.push_back({Token::kString, std::move(s), at});
      ++i;
    } else {
      std::string op;
      for (const char* o : kOps2)
        if (code.compare(i, 2, o) == 0) op = o;
      if (op.empty() && std::strchr("+-*/%~<>=()[]{}.,:|", c)) op = std::string(1, c);
      if (op.empty()) fail("{}:{}: unexpected character '{}' in a tag", source, line, c);
      out.push_back({Token::kOp, op, line});
      i += op.size();
    }
  }
  out.push_back({Token::kEnd, "", line});
  return out;
}

}  // namespace skim::jinja
