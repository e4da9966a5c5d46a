// Segments and tokens -> statements, with Jinja2's operator precedence (filters and tests bind
// tighter than arithmetic: `a + b is odd` is `a + (b is odd)`).
#pragma once

#include <string>

#include "tokenizer/jinja/ast.h"

namespace skim::jinja {

// Throws skim::Error naming `source` and the line on a syntax error, an unknown tag or
// nesting deeper than max_depth.
Body parse_template(const std::string& text, const std::string& source, int max_depth);

}  // namespace skim::jinja
