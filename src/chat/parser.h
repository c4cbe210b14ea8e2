// Private to the chat template renderer: the expression half of the template parser (the token
// cursor and jinja2's expression grammar). The statement half is in chat_parser.cc.
// Operator precedence follows jinja2's: condexpr < or < and < not < compare < + - < ~ < * / // %
// < ** < unary, then postfix (. [] ()), filters (|) and tests (is) bind tighter than any binary
// operator.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/eval.h"

namespace tandem::chat {

class ExprParser {
 public:
  explicit ExprParser(const std::vector<Token>& tokens) : toks_(tokens) {}

 protected:
  using T = Token::Type;

  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool IsOp(const char* op) const { return Cur().type == T::kOp && Cur().text == op; }
  bool IsName(const char* n) const { return Cur().type == T::kName && Cur().text == n; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* n) {
    if (!IsName(n)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kVarEnd: return "end of print statement '}}'";
      case T::kBlockEnd: return "end of statement block '%}'";
      case T::kEof: return "end of template";
      case T::kString: return "string";
      case T::kText: return "template text";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void Unexpected(const char* expected) {
    FailAt(Cur().line, std::string("syntax error: expected ") + expected + ", got " + Describe(Cur()));
  }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) Unexpected((std::string("'") + op + "'").c_str());
  }
  std::string ExpectName() {
    if (Cur().type != T::kName) Unexpected("a name");
    std::string n = Cur().text;
    Next();
    return n;
  }
  void ExpectBlockEnd() {
    if (Cur().type != T::kBlockEnd) Unexpected("'%}'");
    Next();
  }

  ExprPtr New(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }


  bool AtTupleEnd(bool for_iter) const;
  ExprPtr ParseTuple(bool with_condexpr, bool for_iter, bool explicit_parens = false);
  ExprPtr ParseExpression(bool with_condexpr);
  ExprPtr Binary(const std::string& op, ExprPtr a, ExprPtr b, int line);
  ExprPtr ParseOr();
  ExprPtr ParseAnd();
  ExprPtr ParseNot();
  ExprPtr ParseCompare();
  template <typename Sub>
  ExprPtr ParseLeftAssoc(std::initializer_list<const char*> ops, Sub sub);
  ExprPtr ParseMath1();
  ExprPtr ParseConcat();
  ExprPtr ParseMath2();
  ExprPtr ParsePow();
  ExprPtr ParseUnaryFiltered();
  ExprPtr ParseUnary(bool with_filter);
  ExprPtr ParsePrimary();
  ExprPtr ParsePostfix(ExprPtr e);
  ExprPtr ParseSubscript(ExprPtr target, int line);
  void ParseArgs(Expr& e);
  ExprPtr ParseCall(ExprPtr callee);
  ExprPtr ParseFilterChain(ExprPtr e, bool filters_only);

  const std::vector<Token>& toks_;
  // Nesting of unary operators, `not`, parentheses, brackets and calls being parsed: beyond
  // kMaxExpressionNesting (eval.h) a TemplateError, before the parser's own recursion can overflow
  // the thread's stack (5,000 unary minus signs: found by the chat_template fuzzer under ASan).
  int nesting_ = 0;
  struct Nest {
    explicit Nest(ExprParser& p);
    ~Nest() { --p_.nesting_; }
    ExprParser& p_;
  };
  size_t pos_ = 0;
};

}  // namespace tandem::chat
