// Expression parsing (see chat_parser.h).
#include "chat/parser.h"

namespace tandem::chat {

bool ExprParser::AtTupleEnd(bool for_iter) const {
  if (Cur().type == T::kVarEnd || Cur().type == T::kBlockEnd || Cur().type == T::kEof) return true;
  if (Cur().type == T::kOp && Cur().text == ")") return true;
  if (for_iter && Cur().type == T::kName && (Cur().text == "if" || Cur().text == "recursive")) return true;
  return false;
}

ExprPtr ExprParser::ParseTuple(bool with_condexpr, bool for_iter, bool explicit_parens) {
  const int line = Cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty() && !SkipOp(",")) break;
    if (!items.empty()) is_tuple = true;
    if (AtTupleEnd(for_iter)) break;
    items.push_back(with_condexpr ? ParseExpression(true) : ParseOr());
  }
  if (items.empty() && !explicit_parens) Unexpected("an expression");
  if (!is_tuple && items.size() == 1) return std::move(items[0]);
  auto e = New(Expr::Kind::kList, line);
  e->is_tuple = true;
  e->args = std::move(items);
  return e;
}

ExprPtr ExprParser::ParseExpression(bool with_condexpr) {
  ExprPtr e = ParseOr();
  while (with_condexpr && IsName("if")) {
    const int line = Cur().line;
    Next();
    auto c = New(Expr::Kind::kCondExpr, line);
    c->args.push_back(ParseOr());
    c->args.push_back(std::move(e));
    c->args.push_back(SkipName("else") ? ParseExpression(true) : nullptr);
    e = std::move(c);
  }
  return e;
}

ExprPtr ExprParser::Binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
  auto e = New(Expr::Kind::kBinary, line);
  e->name = op;
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprPtr ExprParser::ParseOr() {
  ExprPtr e = ParseAnd();
  while (IsName("or")) {
    int line = Cur().line;
    Next();
    e = Binary("or", std::move(e), ParseAnd(), line);
  }
  return e;
}

ExprPtr ExprParser::ParseAnd() {
  ExprPtr e = ParseNot();
  while (IsName("and")) {
    int line = Cur().line;
    Next();
    e = Binary("and", std::move(e), ParseNot(), line);
  }
  return e;
}

ExprPtr ExprParser::ParseNot() {
  if (IsName("not")) {
    Nest nest(*this);
    auto e = New(Expr::Kind::kUnary, Cur().line);
    Next();
    e->name = "not";
    e->args.push_back(ParseNot());
    return e;
  }
  return ParseCompare();
}

ExprPtr ExprParser::ParseCompare() {
  const int line = Cur().line;
  ExprPtr first = ParseMath1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (Cur().type == T::kOp &&
        (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
         Cur().text == ">" || Cur().text == ">=")) {
      op = Cur().text;
      Next();
    } else if (IsName("in")) {
      op = "in";
      Next();
    } else if (IsName("not") && Peek().type == T::kName && Peek().text == "in") {
      op = "notin";
      Next();
      Next();
    } else {
      break;
    }
    if (!cmp) {
      cmp = New(Expr::Kind::kCompare, line);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(ParseMath1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

template <typename Sub>
ExprPtr ExprParser::ParseLeftAssoc(std::initializer_list<const char*> ops, Sub sub) {
  ExprPtr e = (this->*sub)();
  while (Cur().type == T::kOp) {
    bool matched = false;
    for (const char* op : ops) {
      if (Cur().text == op) {
        int line = Cur().line;
        Next();
        e = Binary(op, std::move(e), (this->*sub)(), line);
        matched = true;
        break;
      }
    }
    if (!matched) break;
  }
  return e;
}

ExprPtr ExprParser::ParseMath1() { return ParseLeftAssoc({"+", "-"}, &ExprParser::ParseConcat); }
ExprPtr ExprParser::ParseConcat() { return ParseLeftAssoc({"~"}, &ExprParser::ParseMath2); }
ExprPtr ExprParser::ParseMath2() { return ParseLeftAssoc({"*", "/", "//", "%"}, &ExprParser::ParsePow); }
ExprPtr ExprParser::ParsePow() { return ParseLeftAssoc({"**"}, &ExprParser::ParseUnaryFiltered); }
ExprPtr ExprParser::ParseUnaryFiltered() { return ParseUnary(true); }

ExprParser::Nest::Nest(ExprParser& p) : p_(p) {
  if (++p_.nesting_ > kMaxExpressionNesting) {
    --p_.nesting_;
    FailAt(p_.Cur().line, "expression nested too deeply (more than " + std::to_string(kMaxExpressionNesting) +
                              " levels)");
  }
}

ExprPtr ExprParser::ParseUnary(bool with_filter) {
  Nest nest(*this);
  ExprPtr e;
  if (IsOp("-") || IsOp("+")) {
    e = New(Expr::Kind::kUnary, Cur().line);
    e->name = Cur().text;
    Next();
    e->args.push_back(ParseUnary(false));
  } else {
    e = ParsePostfix(ParsePrimary());
  }
  return with_filter ? ParseFilterChain(std::move(e), false) : std::move(e);
}

ExprPtr ExprParser::ParsePrimary() {
  const Token& t = Cur();
  const int line = t.line;
  if (t.type == T::kName) {
    auto e = New(Expr::Kind::kLiteral, line);
    const std::string& n = t.text;
    if (n == "true" || n == "True") e->value = Value::Bool(true);
    else if (n == "false" || n == "False") e->value = Value::Bool(false);
    else if (n == "none" || n == "None") e->value = Value::None();
    else {
      e->kind = Expr::Kind::kName;
      e->name = n;
    }
    Next();
    return e;
  }
  if (t.type == T::kString) {
    std::string s;
    while (Cur().type == T::kString) {
      s += Cur().text;
      Next();
    }
    auto e = New(Expr::Kind::kLiteral, line);
    e->value = Value::Str(std::move(s));
    return e;
  }
  if (t.type == T::kInt || t.type == T::kFloat) {
    auto e = New(Expr::Kind::kLiteral, line);
    e->value = t.type == T::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
    Next();
    return e;
  }
  if (SkipOp("(")) {
    ExprPtr e = ParseTuple(true, false, true);
    ExpectOp(")");
    return e;
  }
  if (SkipOp("[")) {
    auto e = New(Expr::Kind::kList, line);
    while (!IsOp("]")) {
      e->args.push_back(ParseExpression(true));
      if (!SkipOp(",")) break;
    }
    ExpectOp("]");
    return e;
  }
  if (SkipOp("{")) {
    auto e = New(Expr::Kind::kDict, line);
    while (!IsOp("}")) {
      e->args.push_back(ParseExpression(true));
      ExpectOp(":");
      e->args.push_back(ParseExpression(true));
      if (!SkipOp(",")) break;
    }
    ExpectOp("}");
    return e;
  }
  Unexpected("an expression");
}

ExprPtr ExprParser::ParsePostfix(ExprPtr e) {
  while (true) {
    const int line = Cur().line;
    if (SkipOp(".")) {
      if (Cur().type == T::kInt) {
        auto g = New(Expr::Kind::kGetItem, line);
        g->args.push_back(std::move(e));
        auto k = New(Expr::Kind::kLiteral, line);
        k->value = Value::Int(Cur().int_value);
        Next();
        g->args.push_back(std::move(k));
        e = std::move(g);
        continue;
      }
      auto g = New(Expr::Kind::kGetAttr, line);
      g->name = ExpectName();
      g->args.push_back(std::move(e));
      e = std::move(g);
    } else if (SkipOp("[")) {
      e = ParseSubscript(std::move(e), line);
    } else if (IsOp("(")) {
      e = ParseCall(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::ParseSubscript(ExprPtr target, int line) {
  ExprPtr parts[3];
  if (!IsOp(":")) {
    parts[0] = ParseExpression(true);
    if (SkipOp("]")) {
      auto g = New(Expr::Kind::kGetItem, line);
      g->args.push_back(std::move(target));
      g->args.push_back(std::move(parts[0]));
      return g;
    }
  }
  ExpectOp(":");
  if (!IsOp("]") && !IsOp(":")) parts[1] = ParseExpression(true);
  if (SkipOp(":") && !IsOp("]")) parts[2] = ParseExpression(true);
  ExpectOp("]");
  auto s = New(Expr::Kind::kSlice, line);
  s->args.push_back(std::move(target));
  for (auto& p : parts) s->args.push_back(std::move(p));
  return s;
}

// '(' args ')' into e->args (after the existing ones) and e->kwargs.
void ExprParser::ParseArgs(Expr& e) {
  ExpectOp("(");
  while (!IsOp(")")) {
    if (IsOp("*") || IsOp("**")) FailAt(Cur().line, "unsupported construct '*args' in call");
    if (Cur().type == T::kName && Peek().type == T::kOp && Peek().text == "=") {
      std::string k = Cur().text;
      Next();
      Next();
      e.kwargs.emplace_back(k, ParseExpression(true));
    } else {
      if (!e.kwargs.empty()) FailAt(Cur().line, "syntax error: positional argument after keyword argument");
      e.args.push_back(ParseExpression(true));
    }
    if (!SkipOp(",")) break;
  }
  ExpectOp(")");
}

ExprPtr ExprParser::ParseCall(ExprPtr callee) {
  auto c = New(Expr::Kind::kCall, Cur().line);
  c->args.push_back(std::move(callee));
  ParseArgs(*c);
  return c;
}

// Filters, tests and calls after a unary expression; `filters_only` for {% filter %}.
ExprPtr ExprParser::ParseFilterChain(ExprPtr e, bool filters_only) {
  bool first = filters_only;
  while (true) {
    const int line = Cur().line;
    if (first || SkipOp("|")) {
      first = false;
      std::string name = ExpectName();
      if (!IsKnownFilter(name)) FailAt(line, "unsupported filter '" + name + "'");
      auto f = New(Expr::Kind::kFilter, line);
      f->name = name;
      f->args.push_back(std::move(e));
      if (IsOp("(")) ParseArgs(*f);
      e = std::move(f);
    } else if (!filters_only && IsName("is")) {
      Next();
      auto t = New(Expr::Kind::kTest, line);
      t->negated = SkipName("not");
      t->name = ExpectName();
      if (!IsKnownTest(t->name)) FailAt(line, "unsupported test '" + t->name + "'");
      t->args.push_back(std::move(e));
      if (IsOp("(")) {
        ParseArgs(*t);
      } else if ((Cur().type == T::kName || Cur().type == T::kString || Cur().type == T::kInt ||
                  Cur().type == T::kFloat || IsOp("[") || IsOp("{")) &&
                 !(IsName("else") || IsName("or") || IsName("and"))) {
        t->args.push_back(ParsePostfix(ParsePrimary()));
      }
      e = std::move(t);
    } else if (!filters_only && IsOp("(")) {
      e = ParseCall(std::move(e));
    } else {
      return e;
    }
  }
}

}  // namespace tandem::chat
