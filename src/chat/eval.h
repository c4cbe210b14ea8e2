// Private to the chat template renderer: evaluation of a parsed template, and the registries of
// filters, tests and methods (the parser rejects names that are not registered).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"

namespace tandem::chat {

bool IsKnownFilter(const std::string& name);
bool IsKnownTest(const std::string& name);

class Evaluator;

// Applies filter `name` (the parser has checked it exists). Throws TemplateError.
Value ApplyFilter(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args);
// Applies test `name`; unknown names throw (they can come from select/selectattr arguments).
bool ApplyTest(const std::string& name, const Value& input, CallArgs& args);
// obj.name as jinja2's sandboxed getattr: methods of str/dict/list first (as bound callables),
// then dict items; Undefined when absent. Throws for an attribute of an undefined value.
Value GetAttr(const Value& obj, const std::string& name);
// obj[key] as jinja2's getitem: items first, then (for string keys) attributes.
Value GetItem(const Value& obj, const Value& key);
// Iterates a value as Python's iter() does (list items, dict keys, string characters,
// undefined -> nothing). Throws for non-iterables.
ValueList Iterate(const Value& v);
// Globals available to every template: range, namespace, dict, raise_exception, strftime_now.
void AddGlobals(std::unordered_map<std::string, Value>& globals);

using Frame = std::unordered_map<std::string, Value>;

// Nested calls (macros calling macros, themselves included) one render may make: deeper is a
// TemplateError, as Python's recursion limit makes it a RecursionError in jinja2, instead of the
// rendering thread's stack overflowing (a template macro calling itself, found by fuzzing).
inline constexpr int kMaxTemplateCallDepth = 256;
// Nested expressions: a template nesting unary operators, `not`, parentheses, brackets or calls
// deeper than kMaxExpressionNesting does not parse, and one render may hold at most
// kMaxEvalDepth expressions in evaluation at once (a chain like 1+1+...+1 is a left-deep tree,
// parsed iteratively); each is a TemplateError where jinja2 would raise Python's RecursionError,
// instead of the thread's stack overflowing (found by the chat_template fuzzer under ASan: 2,800
// unary signs).
inline constexpr int kMaxExpressionNesting = 256;
inline constexpr int kMaxEvalDepth = 1000;
// Text one render may emit, counted at every level (a macro's output, then again where its caller
// writes it): beyond is a TemplateError. Macros whose output doubles with each nesting level grow
// without bound within the call depth (found by fuzzing: 20 s for one 3.7 KB template).
// The default of ChatTemplateLimits::max_output_bytes.
inline constexpr size_t kMaxTemplateOutputBytes = size_t{16} << 20;
// Statements executed plus loop iterations in one render: beyond is a TemplateError. Templates are
// programs (loops over range() nest); a chat template of a real model takes a few thousand steps
// for a long conversation. Bounds a render's time whatever the template does.
// The default of ChatTemplateLimits::max_steps.
inline constexpr int64_t kMaxTemplateSteps = int64_t{2} << 20;

class Evaluator {
 public:
  // `root` holds the globals and the render context; top-level {% set %} writes into it. The
  // output and step budgets are those of Limits() when constructed.
  explicit Evaluator(std::shared_ptr<Frame> root);

  void Render(const Body& body, std::string& out);
  Value Eval(const Expr& e);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow Exec(const Body& body, std::string& out);
  Flow ExecStmt(const Stmt& s, std::string& out);
  void Emit(std::string& out, std::string_view text, int line);  // out += text, within the budget
  Flow ExecFor(const Stmt& s, std::string& out);
  void ExecSet(const Stmt& s, Value v);
  Value MakeMacro(const Stmt& s, const std::string& name);
  Value CallValue(const Expr& e);
  Value EvalBinary(const Expr& e);
  Value EvalCompare(const Expr& e);
  Value EvalSubscript(const Expr& e);
  void Assign(const std::string& name, Value v);
  Value Lookup(const std::string& name) const;
  void EvalArgs(const Expr& e, size_t first, CallArgs& args);

  std::vector<std::shared_ptr<Frame>> frames_;
  size_t emitted_ = 0;  // Emit's count, for max_output_bytes (kMaxTemplateOutputBytes)
  int64_t steps_ = 0;   // for max_steps (kMaxTemplateSteps)
  size_t max_output_bytes_;
  int64_t max_steps_;
  void Step(int line);  // one more step, within the budget
};

// "<message> at line N"
[[noreturn]] void FailAt(int line, const std::string& message);

}  // namespace tandem::chat
