// Binary operators and comparisons with Python semantics (int/float promotion, floor division and
// modulo signs, str/list concatenation and repetition, `in`).
#include <climits>
#include <cmath>

#include "chat/eval.h"
#include "chat/text.h"

namespace tandem::chat {
namespace {

[[noreturn]] void Unsupported(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) throw TemplateError(a.UndefinedMessage());
  if (b.is_undefined()) throw TemplateError(b.UndefinedMessage());
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

Value Repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.is_string() ? seq.str().size() : seq.list->size();
  // Nothing repeated any number of times is nothing: '' * 35**7 looped 6 x 10^10 times (a
  // chat_template fuzzer timeout); the size checks below pass for an empty unit.
  if (unit == 0) n = 0;
  if (n > 0) {
    // Strings: up to Limits().max_string_bytes bytes; lists: up to max_iterated_items items.
    const ChatTemplateLimits& limits = Limits();
    if (seq.is_string() && static_cast<uint64_t>(n) > limits.max_string_bytes / unit) {
      CheckStringSize(limits.max_string_bytes + 1, "'*'");
    }
    if (!seq.is_string() && static_cast<uint64_t>(n) > limits.max_iterated_items / unit) {
      throw TemplateError("'*' would make a list of more than " +
                          CountText(limits.max_iterated_items) + " items");
    }
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.str();
    return Value::Str(std::move(out));
  }
  ValueList out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::List(std::move(out), seq.is_tuple);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool Contains(const Value& container, const Value& item) {
  switch (container.type) {
    case Value::Type::kString:
      if (!item.is_string())
        throw TemplateError(std::string("'in <string>' requires string as left operand, not ") + item.TypeName());
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::kList:
      for (const auto& v : *container.list)
        if (Equal(v, item)) return true;
      return false;
    case Value::Type::kDict: return container.dict->Find(item) != nullptr;
    case Value::Type::kUndefined: return false;
    default: throw TemplateError(std::string("argument of type '") + container.TypeName() + "' is not iterable");
  }
}

}  // namespace

Value Evaluator::EvalBinary(const Expr& e) {
  Value a = Eval(*e.args[0]);
  Value b = Eval(*e.args[1]);
  const std::string& op = e.name;
  if (op == "~") {
    std::string sa = PyStr(a), sb = PyStr(b);
    CheckStringSize(sa.size() + sb.size(), "'~'");
    return Value::Str(sa + sb);
  }
  if (a.is_number() && b.is_number()) {
    bool fl = a.type == Value::Type::kFloat || b.type == Value::Type::kFloat;
    // Python's integers are unbounded, these are 64-bit: a result past int64 is a TemplateError
    // (never signed overflow, which C++ leaves undefined).
    auto checked = [&](bool overflow, int64_t r) {
      if (overflow) throw TemplateError("integer overflow in '" + op + "' (this template engine's integers are 64-bit)");
      return Value::Int(r);
    };
    if (!fl && (op == "+" || op == "-" || op == "*")) {
      int64_t r = 0;
      bool overflow = op == "+"   ? __builtin_add_overflow(a.as_int(), b.as_int(), &r)
                      : op == "-" ? __builtin_sub_overflow(a.as_int(), b.as_int(), &r)
                                  : __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return checked(overflow, r);
    }
    if (op == "+") return Value::Float(a.as_double() + b.as_double());
    if (op == "-") return Value::Float(a.as_double() - b.as_double());
    if (op == "*") return Value::Float(a.as_double() * b.as_double());
    if (op == "/") {
      if (b.as_double() == 0) throw TemplateError("division by zero");
      return Value::Float(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0) throw TemplateError(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (!fl) {
        if (a.as_int() == INT64_MIN && b.as_int() == -1) return op == "%" ? Value::Int(0) : checked(true, 0);
        int64_t q = FloorDiv(a.as_int(), b.as_int());
        return op == "//" ? Value::Int(q) : Value::Int(a.as_int() - q * b.as_int());
      }
      double x = a.as_double(), y = b.as_double();
      double m = std::fmod(x, y);
      double div = (x - m) / y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        div -= 1.0;
      }
      if (op == "%") return Value::Float(m == 0 ? std::copysign(0.0, y) : m);
      double fd = std::floor(div);
      if (div - fd > 0.5) fd += 1.0;
      return Value::Float(div == 0 ? std::copysign(0.0, x / y) : fd);
    }
    if (op == "**") {
      if (!fl && b.as_int() >= 0) {  // by squaring: 64 rounds at most, an overflow is an error
        int64_t result = 1, base = a.as_int(), exp = b.as_int();
        bool overflow = false;
        while (exp > 0 && !overflow) {
          if (exp & 1) overflow = __builtin_mul_overflow(result, base, &result);
          exp >>= 1;
          if (exp > 0 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
        }
        return checked(overflow, result);
      }
      return Value::Float(std::pow(a.as_double(), b.as_double()));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      CheckStringSize(a.str().size() + b.str().size(), "'+'");
      return Value::Str(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
      ValueList out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::List(std::move(out), a.is_tuple);
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return Repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string() && !b.is_undefined())
    throw TemplateError("unsupported construct: printf-style string formatting ('%')");
  Unsupported(op, a, b);
}

Value Evaluator::EvalCompare(const Expr& e) {
  Value a = Eval(*e.args[0]);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value b = Eval(*e.args[k + 1]);
    const std::string& op = e.ops[k];
    bool r;
    if (op == "==") r = Equal(a, b);
    else if (op == "!=") r = !Equal(a, b);
    else if (op == "<") r = Less(a, b);
    else if (op == ">") r = Less(b, a);
    else if (op == "<=") r = Less(a, b) || Equal(a, b);
    else if (op == ">=") r = Less(b, a) || Equal(a, b);
    else if (op == "in") r = Contains(b, a);
    else r = !Contains(b, a);
    if (!r) return Value::Bool(false);
    a = std::move(b);
  }
  return Value::Bool(true);
}

}  // namespace tandem::chat
