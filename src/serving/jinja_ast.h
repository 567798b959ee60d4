// The parsed form of a chat template: expressions and statements as plain trees, built once by the parser and
// only read afterwards (many renders at once may walk one tree).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serving/jinja_value.h"

namespace deepspeed::serving::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// One node kind per Jinja2 expression form. `args` holds the children:
//   kList: the items (`name` "tuple" for (a, b))   kDict: key, value, key, value, ...
//   kAttr: [object] (`name` the attribute) kItem: [object, key]
//   kSlice: [object, start, stop, step]   (absent parts are null)
//   kCall: [callee, args..., kwargs...]   kFilter / kTest: [input, args..., kwargs...] (`name` the filter or test)
//   kUnary: [operand] (`name` "-" / "+")  kNot: [operand]
//   kBinary: [left, right] (`name` the operator: + - * / // % ** ~)   kAnd / kOr: [left, right]
//   kCompare: [first, others...] with `ops` between them (== != < <= > >= in notin)
//   kCond: [value, condition, else value or null]
struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kNot,
    kBinary,
    kAnd,
    kOr,
    kCompare,
    kCond
  };
  Kind kind = Kind::kLiteral;
  size_t offset = 0;
  std::string name;
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<std::string> kwnames;  // kCall / kFilter / kTest: the names of the trailing keyword arguments
  std::vector<std::string> ops;      // kCompare
  bool negated = false;              // kTest: `is not`
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// kText: `text` printed as is. kOutput: {{ expr }}. kIf: `branches` (a null condition is the else).
// kFor: `targets` over `expr`, filtered by `cond`, `body` per item, `else_body` when none.
// kSet: `targets` = `expr` (unpacked when several), or, with `attr`, targets[0].attr = expr on a namespace.
// kSetBlock: targets[0] = what `body` prints. kMacro: `name`(`params` with `defaults`, null where required).
// kBreak, kContinue. kScope: `body` as is ({% generation %}, which transformers renders transparently).
struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kScope };
  Kind kind = Kind::kText;
  size_t offset = 0;
  std::string text;
  std::string name;
  std::string attr;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
};

struct Template {
  std::string source_name;
  std::string source;  // normalized (jinja_lexer.h), what the offsets point into
  Body body;
};

}  // namespace deepspeed::serving::jinja
