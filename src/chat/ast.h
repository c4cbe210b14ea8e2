// Private to the chat template renderer: the syntax tree the parser builds and the evaluator walks.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/lexer.h"
#include "chat/value.h"

namespace tandem::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // args (is_tuple for tuples)
    kDict,      // args: key, value, key, value...
    kGetAttr,   // args[0] . name
    kGetItem,   // args[0] [ args[1] ]
    kSlice,     // args[0] [ args[1] : args[2] : args[3] ] (null parts omitted)
    kCall,      // args[0] ( args[1..] , kwargs )
    kFilter,    // args[0] | name ( args[1..], kwargs )
    kTest,      // args[0] is [not] name ( args[1..], kwargs ); negated
    kUnary,     // name in {"-", "+", "not"} args[0]
    kBinary,    // args[0] name args[1], name in + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool is_tuple = false;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if cond]: body; else_body
    kSet,       // targets (or ns.attr via attr) = expr; block set when expr is null (body)
    kMacro,     // name(params = defaults): body
    kCallBlock, // {% call(params) expr %} body — body is the caller
    kWith,      // with targets = values: body
    kFilterBlock,  // {% filter f %} body: expr is the filter applied to a placeholder
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::string attr;  // kSet: ns.attr target
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<ExprPtr> defaults;  // kMacro/kCallBlock: one per param (null = none); kWith: values
  Body body;
  Body else_body;
};

// Parses tokens into a template body. Throws TemplateError naming the construct and line for
// syntax errors and for tags, filters and tests that are not supported.
Body ParseTemplate(const std::vector<Token>& tokens);

}  // namespace tandem::chat
