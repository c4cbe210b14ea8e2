// Python value semantics for the chat template renderer (see chat_value.h).
#include "chat/value.h"

#include <charconv>
#include <cmath>

#include "chat/text.h"

namespace tandem::chat {

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.type = Type::kNone;
  return v;
}
Value Value::Bool(bool x) {
  Value v;
  v.type = Type::kBool;
  v.b = x;
  return v;
}
Value Value::Int(int64_t x) {
  Value v;
  v.type = Type::kInt;
  v.i = x;
  return v;
}
Value Value::Float(double x) {
  Value v;
  v.type = Type::kFloat;
  v.f = x;
  return v;
}
static_assert(ChatTemplateLimits{}.max_string_bytes == kMaxTemplateStringBytes);
static_assert(ChatTemplateLimits{}.max_iterated_items == kMaxIteratedStringBytes);

namespace {
const ChatTemplateLimits kDefaultLimits;
thread_local const ChatTemplateLimits* t_limits = nullptr;
}  // namespace

const ChatTemplateLimits& Limits() {
  return t_limits ? *t_limits : kDefaultLimits;
}

ScopedLimits::ScopedLimits(const ChatTemplateLimits& limits) : previous_(t_limits) {
  t_limits = &limits;
}
ScopedLimits::~ScopedLimits() {
  t_limits = previous_;
}

std::string BytesText(size_t bytes) {
  if (bytes != 0 && bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes != 0 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

std::string CountText(uint64_t n) {
  if (n != 0 && n % (uint64_t{1} << 20) == 0) return std::to_string(n >> 20) + "M";
  return std::to_string(n);
}

void CheckStringSize(size_t bytes, const char* what) {
  if (bytes > Limits().max_string_bytes) {
    throw TemplateError(std::string(what) + " would make a string of more than " +
                        BytesText(Limits().max_string_bytes));
  }
}

Value Value::Str(std::string x) {
  CheckStringSize(x.size(), "a string value");
  Value v;
  v.type = Type::kString;
  v.s = std::make_shared<const std::string>(std::move(x));
  return v;
}
Value Value::List(ValueList items, bool tuple) {
  Value v;
  v.type = Type::kList;
  v.is_tuple = tuple;
  v.list = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::NewDict() {
  Value v;
  v.type = Type::kDict;
  v.dict = std::make_shared<Dict>();
  return v;
}
Value Value::Callable(NativeFn fn) {
  Value v;
  v.type = Type::kCallable;
  v.fn = std::make_shared<NativeFn>(std::move(fn));
  return v;
}

std::string Value::UndefinedMessage() const {
  if (s && !s->empty()) return *s;
  return "undefined value";
}

const char* Value::TypeName() const {
  switch (type) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList: return is_tuple ? "tuple" : "list";
    case Type::kDict: return is_namespace ? "Namespace" : "dict";
    case Type::kCallable: return "function";
  }
  return "?";
}

const Value* Dict::Find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (Equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::Set(const Value& key, Value value) {
  for (auto& [k, v] : items) {
    if (Equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < pos.size()) return &pos[index];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

Value CallArgs::GetOr(size_t index, std::string_view name, Value fallback) const {
  const Value* v = Get(index, name);
  return v ? *v : fallback;
}

bool Truthy(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return false;
    case Value::Type::kBool: return v.b;
    case Value::Type::kInt: return v.i != 0;
    case Value::Type::kFloat: return v.f != 0;
    case Value::Type::kString: return !v.s->empty();
    case Value::Type::kList: return !v.list->empty();
    case Value::Type::kDict: return v.is_namespace || !v.dict->items.empty();
    case Value::Type::kCallable: return true;
  }
  return false;
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type == Value::Type::kFloat || b.type == Value::Type::kFloat) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return true;
    case Value::Type::kString: return a.str() == b.str();
    case Value::Type::kList: {
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case Value::Type::kDict: {
      if (a.dict == b.dict) return true;
      if (a.is_namespace || b.is_namespace) return false;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->Find(k);
        if (!other || !Equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Type::kCallable: return a.fn == b.fn;
    default: return false;
  }
}

bool Less(const Value& a, const Value& b) {
  if (a.is_undefined()) throw TemplateError(a.UndefinedMessage());
  if (b.is_undefined()) throw TemplateError(b.UndefinedMessage());
  if (a.is_number() && b.is_number()) {
    if (a.type == Value::Type::kFloat || b.type == Value::Type::kFloat) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order == code point order
  if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      const Value& x = (*a.list)[k];
      const Value& y = (*b.list)[k];
      if (!Equal(x, y)) return Less(x, y);
    }
    return a.list->size() < b.list->size();
  }
  throw TemplateError(std::string("'<' not supported between instances of '") + a.TypeName() + "' and '" +
                      b.TypeName() + "'");
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = sign;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (static_cast<int>(int_part.size()) < exp + 1) int_part.push_back('0');
      std::string frac = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out += int_part + "." + frac;
    } else {
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  }
  return out;
}

namespace {
// StrRepr's byte classes, one table per quote: 0 copied as is (printable ASCII other than the
// backslash and the quote), 1 written after a backslash (the backslash, the quote), 2 the rest
// (control bytes, DEL, UTF-8 sequences), decoded one code point at a time.
struct ReprClasses {
  unsigned char c[256];
};
constexpr ReprClasses MakeReprClasses(char quote) {
  ReprClasses t{};
  for (int b = 0; b < 256; ++b) t.c[b] = b >= 0x20 && b < 0x7F ? 0 : 2;
  t.c[static_cast<unsigned char>('\\')] = 1;
  t.c[static_cast<unsigned char>(quote)] = 1;
  return t;
}
constexpr ReprClasses kReprSingle = MakeReprClasses('\'');
constexpr ReprClasses kReprDouble = MakeReprClasses('"');

std::string StrRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  const unsigned char* cls = quote == '\'' ? kReprSingle.c : kReprDouble.c;
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  // Runs of class 0 are appended at once, runs of class 1 written in place: repr of a repr of a
  // repr (a macro recursion, found by fuzzing) is mostly backslashes, and 16 MiB of them took
  // seconds under ASan one byte at a time.
  const auto* const begin = reinterpret_cast<const unsigned char*>(s.data());
  const auto* const end = begin + s.size();
  const auto* p = begin;
  while (p < end) {
    const unsigned char* q = p;
    while (q < end && cls[*q] == 0) ++q;
    if (q > p) {
      out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(q - p));
      p = q;
      continue;
    }
    if (cls[*p] == 1) {
      while (q < end && cls[*q] == 1) ++q;
      const size_t at = out.size();
      out.resize(at + 2 * static_cast<size_t>(q - p));
      char* w = out.data() + at;
      for (; p < q; ++p) {
        *w++ = '\\';
        *w++ = static_cast<char>(*p);
      }
      continue;
    }
    char32_t c = *p;
    if (c < 0x80) {
      ++p;
    } else {
      p += Utf8DecodeOne(s, static_cast<size_t>(p - begin), &c);
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) {
      static constexpr char kHex[] = "0123456789abcdef";
      const char b[4] = {'\\', 'x', kHex[(c >> 4) & 0xF], kHex[c & 0xF]};
      out.append(b, 4);
    } else {
      AppendUtf8(out, c);
    }
  }
  out.push_back(quote);
  return out;
}
}  // namespace

std::string PyRepr(const Value& v) {
  switch (v.type) {
    case Value::Type::kString: return StrRepr(v.str());
    case Value::Type::kList: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += PyRepr((*v.list)[k]);
        CheckStringSize(out.size(), "repr() of a list");
      }
      if (v.is_tuple && v.list->size() == 1) out += ",";
      out += v.is_tuple ? ")" : "]";
      return out;
    }
    case Value::Type::kDict: {
      std::string out = v.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += PyRepr(k) + ": " + PyRepr(x);
        CheckStringSize(out.size(), "repr() of a dict");
      }
      out += v.is_namespace ? "}>" : "}";
      return out;
    }
    default: return PyStr(v);
  }
}

std::string PyStr(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return "";
    case Value::Type::kNone: return "None";
    case Value::Type::kBool: return v.b ? "True" : "False";
    case Value::Type::kInt: return std::to_string(v.i);
    case Value::Type::kFloat: return FloatRepr(v.f);
    case Value::Type::kString: return v.str();
    case Value::Type::kCallable: return "<function>";
    default: return PyRepr(v);
  }
}

}  // namespace tandem::chat
