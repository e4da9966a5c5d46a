// The parsed template: expressions and statements, each knowing its source line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace skim::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // args (negated: a tuple)
    kDict,      // args: key, value, key, value...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts absent)
    kCall,      // args[0](args[1..], names parallel: "" = positional)
    kFilter,    // args[0] | name(args[1..], names)
    kTest,      // args[0] is [not] name(args[1..]); negated
    kNot,       // not args[0]
    kNeg,       // -args[0]
    kPos,       // +args[0]
    kBinary,    // args[0] op args[1]: + - * / // % ** ~
    kAnd,
    kOr,
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2]...: == != < > <= >= in notin
    kCondition  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;                // name, attribute, filter, test or binary operator
  std::vector<ExprPtr> args;
  std::vector<std::string> names;  // keyword names of call arguments; compare operators
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kGeneration };
  Kind kind;
  int line = 0;
  std::string text;                    // kText
  ExprPtr expr;                        // output, for's iterable, set's value
  std::vector<ExprPtr> conditions;     // if/elif conditions, parallel to bodies
  std::vector<Body> bodies;            // if: a body per condition, then else; for: body, else
  std::vector<std::string> targets;    // for/set: names (several: unpacked); set: name, attribute
  ExprPtr filter;                      // for ... if filter
  bool uses_loop = true;               // for: the body names `loop` (else no loop object is built)
  std::string attribute;               // set ns.attribute
  // macro: name in targets[0], parameter names in params, defaults (null: none)
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
};

}  // namespace skim::jinja
