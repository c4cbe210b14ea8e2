// The evaluator: walks the syntax tree with jinja2's scoping. A for-loop iteration, a macro call
// and a with-block each get a fresh frame (so {% set %} inside them does not leak out; namespace
// attributes do, as the object is shared); {% set %} elsewhere writes the innermost frame.
#include <climits>
#include <cmath>

#include "chat/eval.h"
#include "chat/text.h"

namespace tandem::chat {

void FailAt(int line, const std::string& message) {
  throw TemplateError(message + " at line " + std::to_string(line), false, true);
}

static_assert(ChatTemplateLimits{}.max_output_bytes == kMaxTemplateOutputBytes);
static_assert(ChatTemplateLimits{}.max_steps == kMaxTemplateSteps);

Evaluator::Evaluator(std::shared_ptr<Frame> root)
    : max_output_bytes_(Limits().max_output_bytes), max_steps_(Limits().max_steps) {
  frames_.push_back(std::move(root));
}

void Evaluator::Render(const Body& body, std::string& out) { Exec(body, out); }

Value Evaluator::Lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    auto f = (*it)->find(name);
    if (f != (*it)->end()) return f->second;
  }
  return Value::Undefined("'" + name + "' is undefined");
}

void Evaluator::Assign(const std::string& name, Value v) { (*frames_.back())[name] = std::move(v); }

void Evaluator::Step(int line) {
  if (++steps_ > max_steps_) {
    FailAt(line, "the rendering takes more than " + CountText(static_cast<uint64_t>(max_steps_)) +
                     " steps (statements and loop iterations)");
  }
}

Evaluator::Flow Evaluator::Exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    Step(s->line);
    Flow f = ExecStmt(*s, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

namespace {
// Binds names to a value, unpacking tuples as Python's `a, b = v`.
void Unpack(const std::vector<std::string>& targets, const Value& v, Frame& frame, int line) {
  if (targets.size() == 1) {
    frame[targets[0]] = v;
    return;
  }
  ValueList items = Iterate(v);
  if (items.size() != targets.size())
    FailAt(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                     std::to_string(targets.size()) + " names");
  for (size_t k = 0; k < items.size(); ++k) frame[targets[k]] = items[k];
}
}  // namespace

void Evaluator::Emit(std::string& out, std::string_view text, int line) {
  emitted_ += text.size();
  if (emitted_ > max_output_bytes_) {
    FailAt(line, "the rendering exceeds " + BytesText(max_output_bytes_) +
                     " of output (nested output counted at each level)");
  }
  out += text;
}

Evaluator::Flow Evaluator::ExecStmt(const Stmt& s, std::string& out) {
  switch (s.kind) {
    case Stmt::Kind::kText: Emit(out, s.text, s.line); return Flow::kNormal;
    case Stmt::Kind::kOutput: Emit(out, PyStr(Eval(*s.expr)), s.line); return Flow::kNormal;
    case Stmt::Kind::kIf:
      for (size_t k = 0; k < s.conds.size(); ++k)
        if (Truthy(Eval(*s.conds[k]))) return Exec(s.bodies[k], out);
      return Exec(s.else_body, out);
    case Stmt::Kind::kFor: return ExecFor(s, out);
    case Stmt::Kind::kSet: {
      if (s.expr) {
        ExecSet(s, Eval(*s.expr));
      } else {
        std::string text;
        Exec(s.body, text);
        ExecSet(s, Value::Str(std::move(text)));
      }
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro: Assign(s.text, MakeMacro(s, s.text)); return Flow::kNormal;
    case Stmt::Kind::kCallBlock: {
      const Stmt* stmt = &s;
      Value caller = Value::Callable([this, stmt](CallArgs& a) {
        auto frame = std::make_shared<Frame>();
        for (size_t k = 0; k < stmt->targets.size(); ++k) {
          const Value* v = a.Get(k, stmt->targets[k]);
          (*frame)[stmt->targets[k]] = v ? *v : stmt->defaults[k] ? Eval(*stmt->defaults[k]) : Value::Undefined();
        }
        frames_.push_back(frame);
        std::string text;
        Exec(stmt->body, text);
        frames_.pop_back();
        return Value::Str(std::move(text));
      });
      const Expr& call = *s.expr;
      Value fn = Eval(*call.args[0]);
      if (fn.type != Value::Type::kCallable) FailAt(s.line, "'call' block target is not callable");
      CallArgs args;
      args.line = s.line;
      EvalArgs(call, 1, args);
      args.kw.emplace_back("caller", caller);
      Emit(out, PyStr((*fn.fn)(args)), s.line);
      return Flow::kNormal;
    }
    case Stmt::Kind::kWith: {
      auto frame = std::make_shared<Frame>();
      for (size_t k = 0; k < s.targets.size(); ++k) (*frame)[s.targets[k]] = Eval(*s.defaults[k]);
      frames_.push_back(frame);
      Flow f = Exec(s.body, out);
      frames_.pop_back();
      return f;
    }
    case Stmt::Kind::kFilterBlock: {
      std::string text;
      Flow f = Exec(s.body, text);
      auto frame = std::make_shared<Frame>();
      (*frame)["\x01filter_body"] = Value::Str(std::move(text));
      frames_.push_back(frame);
      Emit(out, PyStr(Eval(*s.expr)), s.line);
      frames_.pop_back();
      return f;
    }
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Evaluator::ExecSet(const Stmt& s, Value v) {
  if (!s.attr.empty()) {
    Value ns = Lookup(s.targets[0]);
    if (!ns.is_dict() || !ns.is_namespace)
      FailAt(s.line, "cannot assign attribute '" + s.attr + "' on '" + s.targets[0] + "' (not a namespace)");
    ns.dict->Set(Value::Str(s.attr), std::move(v));
    return;
  }
  Unpack(s.targets, v, *frames_.back(), s.line);
}

Evaluator::Flow Evaluator::ExecFor(const Stmt& s, std::string& out) {
  Value seq = Eval(*s.expr);
  ValueList items;
  try {
    items = Iterate(seq);
  } catch (const TemplateError& e) {
    FailAt(s.line, e.what());
  }
  if (s.cond) {
    ValueList kept;
    for (auto& item : items) {
      Step(s.line);
      auto frame = std::make_shared<Frame>();
      Unpack(s.targets, item, *frame, s.line);
      frames_.push_back(frame);
      bool keep = Truthy(Eval(*s.cond));
      frames_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return Exec(s.else_body, out);
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    Step(s.line);
    auto frame = std::make_shared<Frame>();
    Unpack(s.targets, items[k], *frame, s.line);
    Value loop = Value::NewDict();
    auto& d = *loop.dict;
    auto set = [&d](const char* key, Value v) { d.items.emplace_back(Value::Str(key), std::move(v)); };
    set("index", Value::Int(k + 1));
    set("index0", Value::Int(k));
    set("revindex", Value::Int(n - k));
    set("revindex0", Value::Int(n - k - 1));
    set("first", Value::Bool(k == 0));
    set("last", Value::Bool(k == n - 1));
    set("length", Value::Int(n));
    set("depth", Value::Int(1));
    set("depth0", Value::Int(0));
    if (k > 0) set("previtem", items[k - 1]);
    if (k + 1 < n) set("nextitem", items[k + 1]);
    set("cycle", Value::Callable([k](CallArgs& a) {
          if (a.pos.empty()) throw TemplateError("no items for cycling given");
          return a.pos[k % a.pos.size()];
        }));
    (*frame)["loop"] = loop;
    frames_.push_back(frame);
    Flow f = Exec(s.body, out);
    frames_.pop_back();
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Evaluator::MakeMacro(const Stmt& s, const std::string& name) {
  const Stmt* stmt = &s;
  // The scopes it sees, held weakly: the macro is stored in one of them, and a strong reference
  // would be a cycle that outlives the render (the whole context leaked per render; found by
  // tests/fuzz/chat_template_fuzz). A scope already gone (a loop's, after the loop) is empty.
  std::vector<std::weak_ptr<Frame>> closure(frames_.begin(), frames_.end());
  return Value::Callable([stmt, closure, name](CallArgs& a) {
    auto frame = std::make_shared<Frame>();
    if (a.pos.size() > stmt->targets.size())
      FailAt(a.line, "macro '" + name + "' takes not more than " + std::to_string(stmt->targets.size()) +
                         " argument(s)");
    std::vector<std::shared_ptr<Frame>> scopes;
    for (const auto& weak : closure) {
      auto scope = weak.lock();
      scopes.push_back(scope ? scope : std::make_shared<Frame>());
    }
    Evaluator inner(scopes[0]);
    inner.frames_ = std::move(scopes);
    inner.frames_.push_back(frame);
    for (const auto& [k, v] : a.kw) {
      bool known = k == "caller";
      for (const auto& t : stmt->targets) known = known || t == k;
      if (!known) FailAt(a.line, "macro '" + name + "' takes no keyword argument '" + k + "'");
    }
    for (size_t k = 0; k < stmt->targets.size(); ++k) {
      const Value* v = a.Get(k, stmt->targets[k]);
      (*frame)[stmt->targets[k]] =
          v ? *v : stmt->defaults[k] ? inner.Eval(*stmt->defaults[k]) : Value::Undefined("'" + stmt->targets[k] + "' is undefined");
    }
    for (const auto& [k, v] : a.kw)
      if (k == "caller") (*frame)["caller"] = v;
    std::string text;
    inner.Exec(stmt->body, text);
    return Value::Str(std::move(text));
  });
}

void Evaluator::EvalArgs(const Expr& e, size_t first, CallArgs& args) {
  for (size_t k = first; k < e.args.size(); ++k) args.pos.push_back(Eval(*e.args[k]));
  for (const auto& [name, x] : e.kwargs) args.kw.emplace_back(name, Eval(*x));
}

Value Evaluator::CallValue(const Expr& e) {
  const Expr& callee = *e.args[0];
  Value fn;
  if (callee.kind == Expr::Kind::kGetAttr) {
    Value obj = Eval(*callee.args[0]);
    fn = GetAttr(obj, callee.name);
    if (fn.is_undefined() && !obj.is_dict())
      FailAt(e.line, std::string("unsupported method '") + callee.name + "' on " + obj.TypeName());
  } else {
    fn = Eval(callee);
  }
  if (fn.type != Value::Type::kCallable) {
    if (fn.is_undefined()) FailAt(e.line, fn.UndefinedMessage() + " (called as a function)");
    FailAt(e.line, std::string("'") + fn.TypeName() + "' object is not callable");
  }
  CallArgs args;
  args.line = e.line;
  EvalArgs(e, 1, args);
  // Per thread, not per Evaluator: each macro call renders its body with an Evaluator of its own.
  static thread_local int call_depth = 0;
  if (call_depth >= kMaxTemplateCallDepth)
    FailAt(e.line, "maximum recursion depth exceeded (" + std::to_string(kMaxTemplateCallDepth) + " nested calls)");
  struct Depth {
    Depth() { ++call_depth; }
    ~Depth() { --call_depth; }
  } depth;
  return (*fn.fn)(args);
}

Value Evaluator::EvalSubscript(const Expr& e) {
  Value obj = Eval(*e.args[0]);
  if (obj.is_undefined()) throw TemplateError(obj.UndefinedMessage());
  std::optional<int64_t> parts[3];
  for (int k = 0; k < 3; ++k) {
    if (!e.args[k + 1]) continue;
    Value v = Eval(*e.args[k + 1]);
    if (v.is_none()) continue;
    if (!v.is_integral()) throw TemplateError("slice indices must be integers or None");
    parts[k] = v.as_int();
  }
  if (parts[2] && *parts[2] == 0) throw TemplateError("slice step cannot be zero");
  int64_t b, en, st;
  if (obj.is_string()) {
    std::u32string u = Utf8Decode(obj.str());
    ResolveSlice(static_cast<int64_t>(u.size()), parts[0], parts[1], parts[2], &b, &en, &st);
    std::u32string r;
    for (int64_t k = b; st > 0 ? k < en : k > en; k += st) r.push_back(u[k]);
    return Value::Str(Utf8Encode(r));
  }
  if (obj.is_list()) {
    ResolveSlice(static_cast<int64_t>(obj.list->size()), parts[0], parts[1], parts[2], &b, &en, &st);
    ValueList r;
    for (int64_t k = b; st > 0 ? k < en : k > en; k += st) r.push_back((*obj.list)[k]);
    return Value::List(std::move(r), obj.is_tuple);
  }
  return Value::Undefined(std::string("'") + obj.TypeName() + "' object cannot be sliced");
}

Value Evaluator::Eval(const Expr& e) {
  // Expressions in evaluation on this thread, across macro calls too (kMaxEvalDepth, eval.h).
  static thread_local int eval_depth = 0;
  struct Depth {
    Depth() { ++eval_depth; }
    ~Depth() { --eval_depth; }
  } depth;
  if (eval_depth > kMaxEvalDepth) {
    FailAt(e.line, "expression nested too deeply (more than " + std::to_string(kMaxEvalDepth) + " levels in evaluation)");
  }
  try {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: return Lookup(e.name);
      case Expr::Kind::kList: {
        ValueList items;
        for (const auto& a : e.args) items.push_back(Eval(*a));
        return Value::List(std::move(items), e.is_tuple);
      }
      case Expr::Kind::kDict: {
        Value d = Value::NewDict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = Eval(*e.args[k]);
          d.dict->Set(key, Eval(*e.args[k + 1]));
        }
        return d;
      }
      case Expr::Kind::kGetAttr: return GetAttr(Eval(*e.args[0]), e.name);
      case Expr::Kind::kGetItem: {
        Value obj = Eval(*e.args[0]);
        return GetItem(obj, Eval(*e.args[1]));
      }
      case Expr::Kind::kSlice: return EvalSubscript(e);
      case Expr::Kind::kCall: return CallValue(e);
      case Expr::Kind::kFilter: {
        Value input = Eval(*e.args[0]);
        CallArgs args;
        args.line = e.line;
        EvalArgs(e, 1, args);
        return ApplyFilter(*this, e.name, input, args);
      }
      case Expr::Kind::kTest: {
        Value input = Eval(*e.args[0]);
        CallArgs args;
        args.line = e.line;
        EvalArgs(e, 1, args);
        return Value::Bool(ApplyTest(e.name, input, args) != e.negated);
      }
      case Expr::Kind::kUnary: {
        Value v = Eval(*e.args[0]);
        if (e.name == "not") return Value::Bool(!Truthy(v));
        if (v.is_undefined()) throw TemplateError(v.UndefinedMessage());
        if (!v.is_number()) throw TemplateError(std::string("bad operand type for unary ") + e.name + ": '" + v.TypeName() + "'");
        if (e.name == "+") return v.type == Value::Type::kFloat ? v : Value::Int(v.as_int());
        if (v.type != Value::Type::kFloat && v.as_int() == INT64_MIN) {
          throw TemplateError("integer overflow in unary '-' (this template engine's integers are 64-bit)");
        }
        return v.type == Value::Type::kFloat ? Value::Float(-v.f) : Value::Int(-v.as_int());
      }
      case Expr::Kind::kBinary: {
        if (e.name == "and") {
          Value a = Eval(*e.args[0]);
          return Truthy(a) ? Eval(*e.args[1]) : a;
        }
        if (e.name == "or") {
          Value a = Eval(*e.args[0]);
          return Truthy(a) ? a : Eval(*e.args[1]);
        }
        return EvalBinary(e);
      }
      case Expr::Kind::kCompare: return EvalCompare(e);
      case Expr::Kind::kCondExpr:
        if (Truthy(Eval(*e.args[0]))) return Eval(*e.args[1]);
        return e.args[2] ? Eval(*e.args[2]) : Value::Undefined("conditional expression had no else branch");
    }
  } catch (const TemplateError& err) {
    if (err.located || err.raised) throw;
    FailAt(e.line, err.what());
  } catch (const std::invalid_argument& err) {
    FailAt(e.line, err.what());
  }
  return Value();
}

}  // namespace tandem::chat
