// A Jinja2 template in the dialect Hugging Face chat templates are written in, rendered as
// transformers renders them (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, {% generation %}). Bounded: hostile templates or inputs end in an error,
// never a crash or a hang.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace skim::jinja {

struct Limits {
  int max_depth = 64;                 // parser nesting (blocks, parentheses)
  int max_eval_depth = 400;           // evaluation nesting, macro calls included
  uint64_t max_steps = 10'000'000;    // evaluation steps, loop iterations, bytes/64 of strings built
  size_t max_size = size_t(32) << 20; // bytes of output or of any string; a 32nd as many list elements
};

class Template {
 public:
  // Parses `text`; throws skim::Error naming `source` and the line of a syntax error or of a
  // construct skim does not support.
  Template(const std::string& text, std::string source, Limits limits = {});

  // `variables`: the names the template sees (plus the builtins range, dict, namespace,
  // raise_exception). Throws skim::Error "source:line: message" on any error, including
  // raise_exception's.
  std::string render(const Dict& variables) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  Limits limits_;
  std::shared_ptr<const Body> body_;
};

}  // namespace skim::jinja
