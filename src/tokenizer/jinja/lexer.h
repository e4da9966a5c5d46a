// Template source -> segments (text, {{ expression }}, {% statement %}) with Jinja2's
// whitespace rules as transformers configures them (trim_blocks, lstrip_blocks, '-' and '+'
// markers, comments dropped, {% raw %}, newlines normalised, one trailing newline dropped),
// and the code inside a tag -> tokens.
#pragma once

#include <string>
#include <vector>

namespace skim::jinja {

struct Segment {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string text;  // the text, or the code between the delimiters
  int line;          // 1-based line of its start
};

// Throws skim::Error naming `source` and the line of an unclosed tag.
std::vector<Segment> split_template(const std::string& text, const std::string& source);

struct Token {
  enum Kind { kName, kInt, kFloat, kString, kOp, kEnd } kind;
  std::string text;  // names, operators, the unescaped string, the number's digits
  int line;
};

// Throws skim::Error naming `source` and `line` on a character no token starts with.
std::vector<Token> tokenize(const std::string& code, int line, const std::string& source);

}  // namespace skim::jinja
