// Attribute and item access as jinja2's sandboxed environment does it, Python methods of str and
// dict (bound as callables), iteration, and the template globals.
#include <ctime>

#include "chat/eval.h"
#include "chat/text.h"

namespace tandem::chat {
namespace {

std::optional<std::string> OptStr(const CallArgs& a, size_t index, const char* name) {
  const Value* v = a.Get(index, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw TemplateError(std::string("expected a string argument '") + name + "'");
  return v->str();
}

std::string ReqStr(const CallArgs& a, size_t index, const char* name) {
  const Value* v = a.Get(index, name);
  if (!v || !v->is_string()) throw TemplateError(std::string("expected a string argument '") + name + "'");
  return v->str();
}

int64_t OptInt(const CallArgs& a, size_t index, const char* name, int64_t fallback) {
  const Value* v = a.Get(index, name);
  if (!v || v->is_none()) return fallback;
  if (!v->is_integral()) throw TemplateError(std::string("expected an integer argument '") + name + "'");
  return v->as_int();
}

Value StrList(std::vector<std::string> parts) {
  ValueList out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::Str(std::move(p)));
  return Value::List(std::move(out));
}

bool AffixMatch(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) throw TemplateError("startswith/endswith arg must be str or a tuple of str");
    const std::string& x = v.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    for (const auto& v : *affix.list)
      if (one(v)) return true;
    return false;
  }
  return one(affix);
}

template <typename Pred>
bool AllCp(const std::string& s, Pred p) {
  if (s.empty()) return false;
  for (char32_t c : Utf8Decode(s))
    if (!p(c)) return false;
  return true;
}

Value StringMethod(const Value& self, const std::string& name, CallArgs& a) {
  const std::string& s = self.str();
  if (name == "startswith" || name == "endswith") {
    const Value* v = a.Get(0, "prefix");
    if (!v) throw TemplateError(name + "() takes at least 1 argument");
    return Value::Bool(AffixMatch(s, *v, name == "startswith"));
  }
  if (name == "split" || name == "rsplit")
    return StrList(PySplit(s, OptStr(a, 0, "sep"), OptInt(a, 1, "maxsplit", -1), name == "rsplit"));
  if (name == "strip") return Value::Str(PyStrip(s, OptStr(a, 0, "chars"), true, true));
  if (name == "lstrip") return Value::Str(PyStrip(s, OptStr(a, 0, "chars"), true, false));
  if (name == "rstrip") return Value::Str(PyStrip(s, OptStr(a, 0, "chars"), false, true));
  if (name == "replace")
    return Value::Str(PyReplace(s, ReqStr(a, 0, "old"), ReqStr(a, 1, "new"),
                                OptInt(a, 2, "count", -1), Limits().max_string_bytes));
  if (name == "lower") return Value::Str(PyLower(s));
  if (name == "upper") return Value::Str(PyUpper(s));
  if (name == "title") return Value::Str(PyTitle(s));
  if (name == "capitalize") return Value::Str(PyCapitalize(s));
  if (name == "find" || name == "rfind") return Value::Int(PyFind(s, ReqStr(a, 0, "sub"), name == "rfind"));
  if (name == "index" || name == "rindex") {
    int64_t k = PyFind(s, ReqStr(a, 0, "sub"), name == "rindex");
    if (k < 0) throw TemplateError("substring not found");
    return Value::Int(k);
  }
  if (name == "count") return Value::Int(PyCount(s, ReqStr(a, 0, "sub")));
  if (name == "splitlines") {
    const Value* k = a.Get(0, "keepends");
    return StrList(PySplitLines(s, k && Truthy(*k)));
  }
  if (name == "join") {
    const Value* v = a.Get(0, "iterable");
    if (!v) throw TemplateError("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const auto& item : Iterate(*v)) {
      if (!item.is_string()) throw TemplateError(std::string("sequence item: expected str instance, ") + item.TypeName() + " found");
      if (!first) out += s;
      first = false;
      out += item.str();
    }
    return Value::Str(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string x = ReqStr(a, 0, "affix");
    bool pre = name == "removeprefix";
    if (AffixMatch(s, Value::Str(x), pre))
      return Value::Str(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
    return self;
  }
  if (name == "isdigit") return Value::Bool(AllCp(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value::Bool(AllCp(s, [](char32_t c) { return IsCased(c); }));
  if (name == "isalnum") return Value::Bool(AllCp(s, IsAlnumCp));
  if (name == "isspace") return Value::Bool(AllCp(s, IsPySpace));
  if (name == "islower" || name == "isupper") {
    bool any_cased = false, ok = true;
    for (char32_t c : Utf8Decode(s)) {
      if (!IsCased(c)) continue;
      any_cased = true;
      ok = ok && (name == "islower" ? ToLowerCp(c) == c : ToUpperCp(c) == c);
    }
    return Value::Bool(any_cased && ok);
  }
  throw TemplateError("unsupported method '" + name + "' on str");
}

bool IsStringMethod(const std::string& n) {
  static const char* kNames[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
                                 "replace", "lower", "upper", "title", "capitalize", "find", "rfind",
                                 "index", "rindex", "count", "splitlines", "join", "removeprefix",
                                 "removesuffix", "isdigit", "isalpha", "isalnum", "isspace", "islower",
                                 "isupper"};
  for (const char* k : kNames)
    if (n == k) return true;
  return false;
}

Value Items(const Value& d) {
  ValueList out;
  for (const auto& [k, v] : d.dict->items) out.push_back(Value::List({k, v}, true));
  return Value::List(std::move(out));
}

Value DictMethod(const Value& self, const std::string& name, CallArgs& a) {
  if (name == "get") {
    const Value* key = a.Get(0, "key");
    if (!key) throw TemplateError("get expected at least 1 argument");
    const Value* v = self.dict->Find(*key);
    return v ? *v : a.GetOr(1, "default", Value::None());
  }
  if (name == "items") return Items(self);
  ValueList out;
  for (const auto& [k, v] : self.dict->items) out.push_back(name == "keys" ? k : v);
  return Value::List(std::move(out));
}

Value Bind(const Value& self, const std::string& name, Value (*method)(const Value&, const std::string&, CallArgs&)) {
  return Value::Callable([self, name, method](CallArgs& a) { return method(self, name, a); });
}

}  // namespace

ValueList Iterate(const Value& v) {
  switch (v.type) {
    case Value::Type::kList: return *v.list;
    case Value::Type::kDict: {
      if (v.is_namespace) break;
      ValueList keys;
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Type::kString: {
      // A value per character: a long string (up to max_string_bytes) would be millions.
      if (v.str().size() > Limits().max_iterated_items) {
        throw TemplateError("iterating over a string of more than " +
                            BytesText(Limits().max_iterated_items) + ", a value per character");
      }
      ValueList chars;
      for (char32_t c : Utf8Decode(v.str())) {
        std::string s;
        AppendUtf8(s, c);
        chars.push_back(Value::Str(std::move(s)));
      }
      return chars;
    }
    case Value::Type::kUndefined: return {};
    default: break;
  }
  throw TemplateError(std::string("'") + v.TypeName() + "' object is not iterable");
}

Value GetAttr(const Value& obj, const std::string& name) {
  switch (obj.type) {
    case Value::Type::kUndefined: throw TemplateError(obj.UndefinedMessage());
    case Value::Type::kString:
      if (IsStringMethod(name)) return Bind(obj, name, StringMethod);
      break;
    case Value::Type::kDict: {
      if (!obj.is_namespace && (name == "get" || name == "items" || name == "keys" || name == "values"))
        return Bind(obj, name, DictMethod);
      if (const Value* v = obj.dict->Find(name)) return *v;
      return Value::Undefined(std::string("'") + (obj.is_namespace ? "Namespace" : "dict object") +
                              "' has no attribute '" + name + "'");
    }
    default: break;
  }
  return Value::Undefined(std::string("'") + obj.TypeName() + " object' has no attribute '" + name + "'");
}

Value GetItem(const Value& obj, const Value& key) {
  switch (obj.type) {
    case Value::Type::kUndefined: throw TemplateError(obj.UndefinedMessage());
    case Value::Type::kList:
      if (key.is_integral()) {
        int64_t n = static_cast<int64_t>(obj.list->size());
        int64_t k = key.as_int() < 0 ? key.as_int() + n : key.as_int();
        if (k >= 0 && k < n) return (*obj.list)[k];
        return Value::Undefined("list index out of range");
      }
      break;
    case Value::Type::kString:
      if (key.is_integral()) {
        std::u32string u = Utf8Decode(obj.str());
        int64_t n = static_cast<int64_t>(u.size());
        int64_t k = key.as_int() < 0 ? key.as_int() + n : key.as_int();
        if (k >= 0 && k < n) return Value::Str(Utf8Encode(u.substr(k, 1)));
        return Value::Undefined("string index out of range");
      }
      break;
    case Value::Type::kDict:
      if (const Value* v = obj.dict->Find(key)) return *v;
      if (key.is_string()) return GetAttr(obj, key.str());
      return Value::Undefined("'dict object' has no attribute '" + PyStr(key) + "'");
    default: break;
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(std::string("'") + obj.TypeName() + " object' has no element " + PyRepr(key));
}

void AddGlobals(std::unordered_map<std::string, Value>& g) {
  g["range"] = Value::Callable([](CallArgs& a) {
    if (a.pos.empty() || a.pos.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
    for (const auto& v : a.pos)
      if (!v.is_integral()) throw TemplateError("range() arguments must be integers");
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = a.pos[0].as_int();
    } else {
      start = a.pos[0].as_int();
      stop = a.pos[1].as_int();
      if (a.pos.size() == 3) step = a.pos[2].as_int();
    }
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    ValueList out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (out.size() >= 100000) throw TemplateError("range too big");
      out.push_back(Value::Int(k));
    }
    return Value::List(std::move(out));
  });
  auto make_dict = [](CallArgs& a, bool ns) {
    Value d = Value::NewDict();
    d.is_namespace = ns;
    for (const auto& p : a.pos) {
      if (!p.is_dict()) throw TemplateError("dict()/namespace() positional argument must be a mapping");
      for (const auto& [k, v] : p.dict->items) d.dict->Set(k, v);
    }
    for (const auto& [k, v] : a.kw) d.dict->Set(Value::Str(k), v);
    return d;
  };
  g["namespace"] = Value::Callable([make_dict](CallArgs& a) { return make_dict(a, true); });
  g["dict"] = Value::Callable([make_dict](CallArgs& a) { return make_dict(a, false); });
  // transformers' raise_exception(message): TemplateError(message). Its message becomes the
  // request's error, so an empty one is named as such (found by the chat_template fuzzer: a 400
  // whose message said nothing); no argument is Python's TypeError.
  g["raise_exception"] = Value::Callable([](CallArgs& a) -> Value {
    const Value* message = a.pos.empty() ? nullptr : &a.pos[0];
    for (const auto& [k, v] : a.kw) {
      if (k == "message" && message == nullptr) message = &v;
    }
    if (message == nullptr) {
      throw TemplateError("raise_exception() missing 1 required positional argument: 'message'");
    }
    std::string text = PyStr(*message);
    if (text.empty()) text = "the chat template raised an error (raise_exception) with an empty message";
    throw TemplateError(std::move(text), true);
  });
  g["strftime_now"] = Value::Callable([](CallArgs& a) {
    std::string fmt = ReqStr(a, 0, "format");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
    return Value::Str(std::string(buf, n));
  });
}

}  // namespace tandem::chat
