// Private to the chat template renderer: the dynamic value type of the Jinja subset, with
// Python semantics (truthiness, ==, <, str(), repr()) as jinja2 exposes them to templates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/template.h"

namespace tandem::chat {

// A render/parse error inside the module; ChatTemplate turns it into InvalidArgument.
// `raised` marks a raise_exception() from the template, whose message is passed on unchanged;
// `located` marks a message that already names the template line.
struct TemplateError : std::runtime_error {
  explicit TemplateError(const std::string& message, bool raised = false, bool located = false)
      : std::runtime_error(message), raised(raised), located(located) {}
  bool raised;
  bool located;
};

// The largest string a render may build (any value, or text being built for one): past it is a
// TemplateError. Without it a template multiplies its strings without bound: chained `join`s
// (each inserts its separator between every character), `'x' * n`, `s ~ s` in a loop (found by
// fuzzing: a 592-byte template spent 12 s under ASan building joins of joins). Same size as the
// output budget (eval.h kMaxTemplateOutputBytes). ChatTemplateLimits::max_string_bytes' default.
inline constexpr size_t kMaxTemplateStringBytes = size_t{16} << 20;
// Iterate() over a string makes a value per character: only strings up to this size; `*` builds
// lists of up to this many items. The default of ChatTemplateLimits::max_iterated_items.
inline constexpr size_t kMaxIteratedStringBytes = size_t{1} << 20;

// The limits of the render running on this thread: those ChatTemplate::Render was given, for its
// duration (a ScopedLimits); ChatTemplateLimits{} (the constants above, eval.h's) outside a render.
// A thread-local because values are built and checked in places that have no Evaluator
// (Value::Str, repr, tojson, methods).
const ChatTemplateLimits& Limits();
class ScopedLimits {
 public:
  explicit ScopedLimits(const ChatTemplateLimits& limits);
  ~ScopedLimits();
  ScopedLimits(const ScopedLimits&) = delete;
  ScopedLimits& operator=(const ScopedLimits&) = delete;

 private:
  const ChatTemplateLimits* previous_;
};
// A size for error messages: "16 MiB", "64 KiB", else "1000 bytes".
std::string BytesText(size_t bytes);
// A count for error messages: "2M" for a multiple of 2^20, else the number.
std::string CountText(uint64_t n);

// Throws the TemplateError when `bytes` exceeds Limits().max_string_bytes; `what` names the
// operation.
void CheckStringSize(size_t bytes, const char* what);


struct Value;
struct Dict;
struct CallArgs;
using ValueList = std::vector<Value>;
using NativeFn = std::function<Value(CallArgs&)>;

struct Value {
  enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Type type = Type::kUndefined;
  bool is_tuple = false;      // kList: a Python tuple (prints as (a, b))
  bool is_namespace = false;  // kDict: a namespace() object (attribute assignment allowed)
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // kString; kUndefined: the hint for error messages
  std::shared_ptr<ValueList> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<NativeFn> fn;

  Value() = default;
  static Value Undefined(std::string hint = {});
  static Value None();
  static Value Bool(bool v);
  static Value Int(int64_t v);
  static Value Float(double v);
  static Value Str(std::string v);
  static Value List(ValueList items = {}, bool tuple = false);
  static Value NewDict();
  static Value Callable(NativeFn fn);

  bool is_undefined() const { return type == Type::kUndefined; }
  bool is_none() const { return type == Type::kNone; }
  bool is_string() const { return type == Type::kString; }
  bool is_list() const { return type == Type::kList; }
  bool is_dict() const { return type == Type::kDict; }
  bool is_number() const { return type == Type::kBool || type == Type::kInt || type == Type::kFloat; }
  bool is_integral() const { return type == Type::kBool || type == Type::kInt; }
  const std::string& str() const { return *s; }
  double as_double() const { return type == Type::kFloat ? f : static_cast<double>(as_int()); }
  int64_t as_int() const { return type == Type::kBool ? (b ? 1 : 0) : i; }

  // The message jinja2 gives when an undefined value is used ("'x' is undefined").
  std::string UndefinedMessage() const;
  // Python type name for error messages ("str", "dict", ...).
  const char* TypeName() const;
};

// An insertion-ordered dict (Python 3.7+ semantics).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(const Value& key, Value value);
};

// Arguments of a call: positional and keyword, and the template line for messages.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
  // Argument `index` or keyword `name`; Undefined when neither is given.
  const Value* Get(size_t index, std::string_view name) const;
  Value GetOr(size_t index, std::string_view name, Value fallback) const;
};

bool Truthy(const Value& v);
bool Equal(const Value& a, const Value& b);
// Python's a < b; throws TemplateError for unorderable types.
bool Less(const Value& a, const Value& b);
// Python str(v): undefined -> "", none -> "None", True/False, floats as repr().
std::string PyStr(const Value& v);
// Python repr(v): strings quoted.
std::string PyRepr(const Value& v);
// Python repr() of a float: shortest round-trip digits, exponent form outside [1e-4, 1e16).
std::string FloatRepr(double d);

// JSON <-> Value. Object key order is kept (pass ordered_json for Python's insertion order).
Value FromJson(const nlohmann::ordered_json& j);
// Python's json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson
// filter calls it. indent: empty optional = None. Throws TemplateError for undefined/callables.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the indent string (an int n is n spaces)
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string JsonDumps(const Value& v, const JsonDumpOptions& options);

}  // namespace tandem::chat
