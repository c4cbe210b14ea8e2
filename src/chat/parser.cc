// Template parser, statement half: tokens -> syntax tree (see chat_ast.h); expressions are parsed
// by ExprParser (chat_parser.h).
#include <set>

#include "chat/parser.h"

namespace tandem::chat {
namespace {

class Parser : public ExprParser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : ExprParser(tokens) {}

  Body ParseAll() {
    std::string end;
    return ParseBody({}, &end, "", 0);
  }

 private:
  Body ParseBody(const std::set<std::string>& stops, std::string* end, const std::string& opener, int open_line) {
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == T::kEof) {
        if (!stops.empty())
          FailAt(open_line, "unterminated '" + opener + "' block (missing '" + *stops.rbegin() + "')");
        return body;
      }
      if (t.type == T::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        Next();
      } else if (t.type == T::kVarBegin) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        s->expr = ParseTuple(true, false);
        if (Cur().type != T::kVarEnd) Unexpected("'}}'");
        Next();
        body.push_back(std::move(s));
      } else if (t.type == T::kBlockBegin) {
        Next();
        if (Cur().type != T::kName) Unexpected("a tag name");
        std::string name = Cur().text;
        if (stops.count(name)) {
          *end = name;
          Next();
          return body;
        }
        ParseTag(body);
      } else {
        Unexpected("template data");
      }
    }
  }

  void ParseTag(Body& body) {
    const int line = Cur().line;
    const std::string name = Cur().text;
    Next();
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string end;
    if (name == "if") {
      s->kind = Stmt::Kind::kIf;
      s->conds.push_back(ParseTuple(false, false));
      ExpectBlockEnd();
      while (true) {
        s->bodies.push_back(ParseBody({"elif", "else", "endif"}, &end, "if", line));
        if (end == "elif") {
          s->conds.push_back(ParseTuple(false, false));
          ExpectBlockEnd();
        } else if (end == "else") {
          ExpectBlockEnd();
          s->else_body = ParseBody({"endif"}, &end, "if", line);
          ExpectBlockEnd();
          break;
        } else {
          ExpectBlockEnd();
          break;
        }
      }
    } else if (name == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets = ParseTargets();
      if (!SkipName("in")) Unexpected("'in'");
      s->expr = ParseTuple(false, true);
      if (SkipName("if")) s->cond = ParseExpression(true);
      if (IsName("recursive")) FailAt(Cur().line, "unsupported construct 'recursive' loop");
      ExpectBlockEnd();
      ++loop_depth_;
      s->body = ParseBody({"else", "endfor"}, &end, "for", line);
      --loop_depth_;
      ExpectBlockEnd();
      if (end == "else") {
        s->else_body = ParseBody({"endfor"}, &end, "for", line);
        ExpectBlockEnd();
      }
    } else if (name == "set") {
      s->kind = Stmt::Kind::kSet;
      if (Cur().type == T::kName && Peek().type == T::kOp && Peek().text == ".") {
        s->targets.push_back(ExpectName());
        Next();
        s->attr = ExpectName();
      } else {
        s->targets = ParseTargets();
      }
      if (SkipOp("=")) {
        s->expr = ParseTuple(true, false);
        ExpectBlockEnd();
      } else {
        if (IsOp("|")) FailAt(Cur().line, "unsupported construct 'filtered block set'");
        if (!s->attr.empty() || s->targets.size() != 1) Unexpected("'='");
        ExpectBlockEnd();
        s->body = ParseBody({"endset"}, &end, "set", line);
        ExpectBlockEnd();
      }
    } else if (name == "macro" || name == "call") {
      s->kind = name == "macro" ? Stmt::Kind::kMacro : Stmt::Kind::kCallBlock;
      if (name == "macro") s->text = ExpectName();
      if (name == "macro" || IsOp("(")) {
        ExpectOp("(");
        while (!IsOp(")")) {
          s->targets.push_back(ExpectName());
          s->defaults.push_back(SkipOp("=") ? ParseExpression(true) : nullptr);
          if (!SkipOp(",")) break;
        }
        ExpectOp(")");
      }
      if (name == "call") {
        s->expr = ParseExpression(true);
        if (s->expr->kind != Expr::Kind::kCall) FailAt(line, "syntax error: expected a call in 'call' block");
      }
      ExpectBlockEnd();
      int saved = loop_depth_;
      loop_depth_ = 0;
      s->body = ParseBody({"end" + name}, &end, name, line);
      loop_depth_ = saved;
      ExpectBlockEnd();
    } else if (name == "with") {
      s->kind = Stmt::Kind::kWith;
      while (Cur().type != T::kBlockEnd) {
        s->targets.push_back(ExpectName());
        ExpectOp("=");
        s->defaults.push_back(ParseExpression(true));
        if (!SkipOp(",")) break;
      }
      ExpectBlockEnd();
      s->body = ParseBody({"endwith"}, &end, "with", line);
      ExpectBlockEnd();
    } else if (name == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      auto placeholder = New(Expr::Kind::kName, line);
      placeholder->name = "\x01filter_body";
      s->expr = ParseFilterChain(std::move(placeholder), true);
      ExpectBlockEnd();
      s->body = ParseBody({"endfilter"}, &end, "filter", line);
      ExpectBlockEnd();
    } else if (name == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      ExpectBlockEnd();
      Body inner = ParseBody({"endgeneration"}, &end, "generation", line);
      ExpectBlockEnd();
      for (auto& st : inner) body.push_back(std::move(st));
      return;
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) FailAt(line, "'" + name + "' outside of a loop");
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      ExpectBlockEnd();
    } else if (name == "elif" || name == "else" || name.rfind("end", 0) == 0) {
      FailAt(line, "unexpected tag '" + name + "'");
    } else {
      FailAt(line, "unsupported tag '" + name + "'");
    }
    body.push_back(std::move(s));
  }

  std::vector<std::string> ParseTargets() {
    std::vector<std::string> names;
    bool paren = SkipOp("(");
    do {
      if (paren && IsOp(")")) break;
      names.push_back(ExpectName());
    } while (SkipOp(","));
    if (paren) ExpectOp(")");
    return names;
  }

  int loop_depth_ = 0;
};

}  // namespace

Body ParseTemplate(const std::vector<Token>& tokens) { return Parser(tokens).ParseAll(); }

}  // namespace tandem::chat
